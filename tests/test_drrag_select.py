"""DR-RAG's selection strategies on hand-made passage sets where the right choice is known.

The sets replay the paper's case (tables 10 and 11): the question "Who is the spouse of the Green
performer?" finds the album Green and the song "Little Green" in stage 1; only question + the
album passage leads to the performer's partner."""

from __future__ import annotations

import pytest

from explorer.methods.drrag.selection import Pick, cfs_select, cis_select, qdc_select
from explorer.retrieval.base import Hit, Passage

P = {key: Passage(key, title, f"{title} text") for key, title in [
    ("G", "Green (Steve Hillage album)"), ("L", "Little Green"), ("M", "Motivation Radio"), ("S", "Steve Hillage"),
    ("Q", "Miquette Giraudy"), ("J", "Joni Mitchell"), ("B", "Blue (Joni Mitchell album)"), ("A", "Al Green")]}


def hits(*keys: str) -> list[Hit]:
    return [Hit(P[k], score=10.0 - i, rank=i + 1) for i, k in enumerate(keys)]


class Scorer:
    """Accepts exactly the given unordered pairs; remembers every call."""

    def __init__(self, *accepted: str, probabilities: dict[str, float] | None = None) -> None:
        self.accepted = {frozenset(pair) for pair in accepted}
        self.probabilities = {frozenset(k): v for k, v in (probabilities or {}).items()}
        self.calls: list[tuple[str, str]] = []

    def __call__(self, a: Passage, b: Passage) -> tuple[float, bool]:
        self.calls.append((a.id, b.id))
        pair = frozenset((a.id, b.id))
        ok = pair in self.accepted
        return self.probabilities.get(pair, 0.9 if ok else 0.1), ok


STAGE1 = hits("G", "L")
CANDIDATES = [hits("M", "S", "Q", "B"), hits("J", "B", "Q")]


def test_qdc_takes_the_first_new_candidate_of_each_stage1_passage() -> None:
    sel = qdc_select(STAGE1, CANDIDATES, 4)
    assert sel.ids == ["G", "L", "M", "J"]
    assert [p.stage for p in sel.picks] == [1, 1, 2, 2]
    assert [p.anchor for p in sel.picks] == [None, None, "G", "L"]
    assert not sel.verdicts


def test_qdc_fills_k_round_robin_and_skips_what_is_chosen() -> None:
    sel = qdc_select(STAGE1, [hits("B", "M", "S"), hits("B", "J")], 6)
    assert sel.ids == ["G", "L", "B", "J", "M", "S"]  # L's "B" is taken already: its next one is J
    assert qdc_select(STAGE1, CANDIDATES, 3).ids == ["G", "L", "M"]
    assert qdc_select(hits("G", "L", "J"), [[], [], []], 2).ids == ["G", "L"]  # k below k1 cuts stage 1
    short = qdc_select(STAGE1, [hits("L"), []], 4)
    assert short.ids == ["G", "L"] and short.notes


def test_cfs_walks_each_list_to_the_first_accepted_pair() -> None:
    scorer = Scorer(("G", "Q"))
    sel = cfs_select(STAGE1, CANDIDATES, 4, scorer)
    # the paper's table 10: the album, the song, and the partner; the song's candidates all fail
    assert sel.ids == ["G", "L", "Q"]
    assert sel.picks[2].anchor == "G" and "accepted" in sel.picks[2].reason
    assert scorer.calls == [("G", "M"), ("G", "S"), ("G", "Q"), ("L", "J"), ("L", "B")]
    assert [(v.a, v.b, v.accepted) for v in sel.verdicts] == [("G", "M", False), ("G", "S", False), ("G", "Q", True),
                                                              ("L", "J", False), ("L", "B", False)]
    assert {d["id"]: d["reason"] for d in sel.dropped} == {
        "M": "stage 2: rejected as a pair with G", "S": "stage 2: rejected as a pair with G",
        "J": "stage 2: rejected as a pair with L", "B": "stage 2: rejected as a pair with L"}


def test_cfs_never_asks_about_a_passage_already_chosen() -> None:
    scorer = Scorer(("G", "Q"), ("L", "B"))
    sel = cfs_select(STAGE1, [hits("Q", "M"), hits("Q", "B")], 4, scorer)
    assert sel.ids == ["G", "L", "Q", "B"]
    assert ("L", "Q") not in scorer.calls
    assert scorer.calls == [("G", "Q"), ("L", "B")]


def test_cfs_deals_the_stage2_places_in_turn() -> None:
    everything = Scorer(*[(a, b) for a in P for b in P if a != b])
    sel = cfs_select(hits("G"), [hits("M", "S", "Q")], 3, everything)
    assert sel.ids == ["G", "M", "S"]  # one stage-1 passage, two places: it brings two partners
    assert cfs_select(STAGE1, CANDIDATES, 2, everything).ids == ["G", "L"]  # no place: no pair judged
    three = cfs_select(STAGE1, CANDIDATES, 3, everything)
    assert three.ids == ["G", "L", "M"] and len(three.verdicts) == 1  # the one place goes to the first
    # a failed stage-1 passage leaves its place empty rather than handing it on
    only_g = cfs_select(STAGE1, CANDIDATES, 3, Scorer(("L", "J")))
    assert only_g.ids == ["G", "L"]
    assert all(v.a == "G" for v in only_g.verdicts)
    assert cfs_select([], [], 4, everything).ids == []


def test_cis_drops_passages_whose_pairs_all_fail() -> None:
    picks = qdc_select(STAGE1, [hits("Q"), hits("J")], 4).picks
    assert [p.id for p in picks] == ["G", "L", "Q", "J"]
    scorer = Scorer(("G", "Q"))
    sel = cis_select(picks, scorer)
    assert sel.ids == ["G", "Q"]
    assert {d["id"] for d in sel.dropped} == {"L", "J"}
    assert len(scorer.calls) == 6  # all C(4, 2) pairs
    assert "accepted in a pair with Q" in sel.picks[0].reason


def test_cis_keeps_every_passage_of_an_accepted_chain() -> None:
    picks = qdc_select(hits("G", "S", "Q"), [[], [], []], 3).picks
    sel = cis_select(picks, Scorer(("G", "S"), ("S", "Q")))
    assert sel.ids == ["G", "S", "Q"] and not sel.dropped


def test_cis_when_every_pair_fails() -> None:
    picks = qdc_select(STAGE1, [hits("M"), hits("J")], 4).picks
    probabilities = {("G", "M"): 0.4, ("L", "J"): 0.2}
    best = cis_select(picks, Scorer(probabilities=probabilities))
    assert best.ids == ["G", "M"] and best.notes  # the most probable pair, said so
    nothing = cis_select(picks, Scorer(probabilities=probabilities), fallback="none")
    assert nothing.ids == [] and len(nothing.dropped) == 4
    single = cis_select([Pick(hits("G")[0], 1, "stage 1")], Scorer())
    assert single.ids == ["G"] and not single.verdicts
    with pytest.raises(ValueError):
        cis_select(picks, Scorer(), fallback="all")


def test_candidate_lists_must_match_stage1() -> None:
    with pytest.raises(ValueError, match="one per passage"):
        qdc_select(STAGE1, [hits("M")], 4)
    with pytest.raises(ValueError):
        cfs_select(STAGE1, [], 4, Scorer())
