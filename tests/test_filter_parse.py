"""Reading a knowledge filter's verdict: real-looking model answers, one row each."""

from __future__ import annotations

import pytest

from explorer.methods.blendfilter.filter_parse import STATUSES, parse_filter_answer

# (answer as a model wrote it, K, passage numbers read, status)
TABLE = [
    # plain lists, as the few-shot format asks
    (" 1, 3", 5, [1, 3], "parsed"),
    ("1,3", 5, [1, 3], "parsed"),
    ("1 3", 5, [1, 3], "parsed"),
    ("[2]", 5, [2], "parsed"),
    ("[1], [4]", 5, [1, 4], "parsed"),
    ("Answer: [2, 5]", 5, [2, 5], "parsed"),
    ("(1) and (2)", 5, [1, 2], "parsed"),
    (" 2-4", 5, [2, 3, 4], "parsed"),
    ("2–4.", 5, [2, 3, 4], "parsed"),
    ("2 to 4", 5, [2, 3, 4], "parsed"),
    # what the embedded model actually writes: lists that run on past K
    (" 5, 7", 5, [5], "parsed"),
    (" 1, 2, 3, 5, 6,", 5, [1, 2, 3, 5], "parsed"),
    (" 1, 2, 4, 5, 6,", 5, [1, 2, 4, 5], "parsed"),
    # prose around the numbers
    ("Passages 1 and 4", 5, [1, 4], "parsed"),
    ("#2 and #5", 5, [2, 5], "parsed"),
    ("Passage 2 and Passage 5 are relevant.", 5, [2, 5], "parsed"),
    ("Knowledge 1 and knowledge 2", 5, [1, 2], "parsed"),
    ("Document #3", 5, [3], "parsed"),
    ("Only passage 3.", 5, [3], "parsed"),
    ("Relevant passages: 1, 2", 5, [1, 2], "parsed"),
    ("I think 2 is relevant", 5, [2], "parsed"),
    ("The relevant one is 3", 5, [3], "parsed"),
    ("First, passage 4 mentions Workaholics.", 5, [4], "parsed"),
    ("1. SuperMansion", 5, [1], "parsed"),
    # number words and ordinals
    ("two and three", 5, [2, 3], "parsed"),
    ("Passage one", 5, [1], "parsed"),
    ("the first and third passages", 5, [1, 3], "parsed"),
    # negations: what a clause rejects is not kept
    ("The relevant passages are 1 and 3. Passage 2 is not relevant.", 5, [1, 3], "parsed"),
    ("Passage 2 is relevant, passage 3 is not.", 5, [2], "parsed"),
    ("Passages 1, 3 and 4 are about the show; the others are irrelevant.", 5, [1, 3, 4], "parsed"),
    ("Passage 4 is irrelevant.", 5, [], "none"),
    # none and all
    ("none", 5, [], "none"),
    (" None of them.", 5, [], "none"),
    ("No.", 5, [], "none"),
    ("There are no relevant passages.", 5, [], "none"),
    ("none of the 5 passages", 5, [], "none"),
    ("all of them", 5, [1, 2, 3, 4, 5], "all"),
    ("All 5 passages are relevant.", 5, [1, 2, 3, 4, 5], "all"),
    ("all of them", 3, [1, 2, 3], "all"),
    ("all except 3", 5, [1, 2, 4, 5], "parsed"),
    ("all but 2", 5, [1, 3, 4, 5], "parsed"),
    # out of range and unreadable
    ("3, 8", 5, [3], "parsed"),
    ("7, 9", 5, [], "out_of_range"),
    ("Jillian Bell (born 25 April 1984) is an American actress", 5, [], "out_of_range"),
    ("Yes", 5, [], "unparseable"),
    ("The answer is SuperMansion.", 5, [], "unparseable"),
    ("", 5, [], "unparseable"),
    ("   \n ", 5, [], "unparseable"),
]


@pytest.mark.parametrize(("answer", "k", "numbers", "status"), TABLE)
def test_filter_answers(answer: str, k: int, numbers: list[int], status: str) -> None:
    verdict = parse_filter_answer(answer, k)
    assert verdict.numbers == numbers
    assert verdict.status == status
    assert verdict.status in STATUSES
    assert all(1 <= n <= k for n in verdict.numbers)


def test_out_of_range_numbers_are_reported_not_kept() -> None:
    verdict = parse_filter_answer("2, 6 and 11", 5)
    assert verdict.numbers == [2]
    assert verdict.ignored == [6, 11]
    assert verdict.to_dict()["ignored"] == [6, 11]


def test_unreadable_answers_never_raise() -> None:
    for junk in (None, "\x00\x01", "[[[(((", "-" * 500, "1" * 40, "passage passage #", "all except"):
        verdict = parse_filter_answer(junk, 5)
        assert verdict.status in STATUSES
        assert all(1 <= n <= 5 for n in verdict.numbers)
    assert parse_filter_answer("1, 2", 0).status == "unparseable"
    assert not parse_filter_answer("Yes", 5).readable
    assert parse_filter_answer("none", 5).readable
