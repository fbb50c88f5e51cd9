"""Answer and retrieval metrics on examples worked out by hand."""

from __future__ import annotations

import pytest

from explorer.eval.metrics import (
    answer_scores,
    contains_answer,
    exact_match,
    f1_score,
    normalize_answer,
    passage_recall,
    to_yes_no,
    token_scores,
    yes_no_accuracy,
)


@pytest.mark.parametrize("raw, normalised", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  An   apple, a day ", "apple day"),
    ("3,677", "3677"),
    ("Theatre of the Absurd", "theatre of absurd"),  # 'the' inside words is kept
    ("A.", ""),
])
def test_normalize_answer(raw: str, normalised: str) -> None:
    assert normalize_answer(raw) == normalised


def test_exact_match_uses_every_alias() -> None:
    assert exact_match("3,677", ["3,677", "3677"]) == 1.0
    assert exact_match("the Colisée", ["Androscoggin Bank Colisée", "Colisée"]) == 1.0
    assert exact_match("3,677 seats", ["3,677"]) == 0.0
    assert exact_match("Paris", "paris.") == 1.0


def test_token_f1_worked_example() -> None:
    # prediction tokens: new york city (3); gold: new york (2); common 2 -> P 2/3, R 1, F1 0.8
    scores = token_scores("New York City", ["New York"])
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(1.0)
    assert scores["f1"] == pytest.approx(0.8)
    # best alias wins: 'york city' against 'New York City' -> P 1, R 2/3, F1 0.8 > 'Big Apple' 0
    assert f1_score("york city", ["Big Apple", "New York City"]) == pytest.approx(0.8)
    assert f1_score("London", ["Paris"]) == 0.0


def test_yes_no_answers_get_no_partial_f1() -> None:
    assert f1_score("yes", ["no"]) == 0.0
    assert f1_score("no", ["no way"]) == 0.0
    assert f1_score("yes", ["yes"]) == 1.0


def test_repeated_tokens_count_once_each() -> None:
    # prediction 'the the paris paris' -> tokens paris paris; gold 'paris' -> common 1, P 1/2, R 1, F1 2/3
    assert f1_score("the the paris paris", "Paris") == pytest.approx(2 / 3)


@pytest.mark.parametrize("text, expected", [
    ("Yes.", "yes"), ("yes, because it is", "yes"), ("No", "no"), ("no, it was not", "no"), ("True", "yes"),
    ("false", "no"), ("The answer is yes.", "yes"), ("So the answer is: No.", "no"), ("Maybe", None),
    ("It is yes or no", None), ("", None), ("Nope!", "no"),
])
def test_to_yes_no(text: str, expected: str | None) -> None:
    assert to_yes_no(text) == expected


def test_yes_no_accuracy() -> None:
    assert yes_no_accuracy("Yes, Genghis Khan has more descendants.", ["yes"]) == 1.0
    assert yes_no_accuracy("No.", ["yes"]) == 0.0
    assert yes_no_accuracy("I cannot tell", ["no"]) == 0.0
    with pytest.raises(ValueError):
        yes_no_accuracy("yes", ["Paris"])


def test_contains_answer_matches_whole_words() -> None:
    assert contains_answer("It seats 3,677 people.", ["3677"]) == 1.0
    assert contains_answer("It was in 19580.", ["1958"]) == 0.0


def test_passage_recall() -> None:
    assert passage_recall(["a", "b"], ["x", "b", "y"]) == 0.5
    assert passage_recall(["a", "b"], []) == 0.0
    assert passage_recall([], ["a"]) is None
    assert passage_recall(["doc#2", "e"], ["doc#1"]) == 0.0
    assert passage_recall(["doc#2", "e"], ["doc#1"], by_document=True) == 0.5


def test_answer_scores() -> None:
    assert answer_scores("Paris", ["Paris"]) == {"em": 1.0, "precision": 1.0, "recall": 1.0, "f1": 1.0,
                                                 "contains": 1.0}
    assert answer_scores("yes indeed", ["yes"], yes_no=True) == {"accuracy": 1.0}
