"""DR-RAG's selection strategies as pure functions over given passages and a pair scorer.

Stage 1 gives ``stage1`` (the passages found with the question alone); stage 2 gives, for each
stage-1 passage, the candidates found with question + that passage. These functions decide which
passages the model reads, and why, without touching a retriever, a model or a trace, so tests can
drive them with hand-made passage sets and a hand-made scorer, and the retrieval-metrics command
runs the very code the method runs.

* :func:`qdc_select` (query-document concatenation): the stage-1 passages, then stage-2
  candidates taken in turn from each stage-1 passage's list (the first one not yet chosen, as in
  the paper's appendix), until ``k`` passages are chosen.
* :func:`cfs_select` (classifier forward selection): for each stage-1 passage in turn, walk its
  candidates and keep the first one the scorer accepts *with that passage*; rejected candidates
  are skipped. Fewer than ``k`` passages may come out.
* :func:`cis_select` (classifier inverse selection): score every pair of the chosen passages and
  drop a passage all of whose pairs are rejected.

A scorer is any ``(passage_a, passage_b) -> (probability, accepted)``; the method wraps the trained
classifier or the LLM judge in one and records each call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from explorer.retrieval.base import Hit, Passage

Scorer = Callable[[Passage, Passage], tuple[float, bool]]
CIS_FALLBACKS = ("best-pair", "none")


@dataclass(frozen=True)
class Pick:
    """A chosen passage: its hit, the stage that found it, why it is in, and (stage 2) its anchor."""

    hit: Hit
    stage: int
    reason: str
    anchor: str | None = None

    @property
    def id(self) -> str:
        return self.hit.passage.id

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "stage": self.stage, "reason": self.reason, "anchor": self.anchor,
                "title": self.hit.passage.title}


@dataclass
class Verdict:
    """One scorer call: the pair (anchor first for CFS), its probability and whether it was accepted."""

    a: str
    b: str
    probability: float
    accepted: bool

    def to_dict(self) -> dict[str, Any]:
        return {"pair": [self.a, self.b], "probability": self.probability, "accepted": self.accepted}


@dataclass
class Selection:
    """What a strategy chose, what it left out and why, and every scorer verdict it asked for."""

    strategy: str
    picks: list[Pick] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.picks]

    @property
    def hits(self) -> list[Hit]:
        return [p.hit for p in self.picks]


def _stage1_picks(stage1: Sequence[Hit]) -> list[Pick]:
    picks, seen = [], set()
    for h in stage1:
        if h.passage.id not in seen:
            seen.add(h.passage.id)
            picks.append(Pick(h, 1, f"stage 1: rank {h.rank} for the question"))
    return picks


def _check_lists(stage1: Sequence[Hit], candidates: Sequence[Sequence[Hit]]) -> None:
    if len(candidates) != len(stage1):
        raise ValueError(f"{len(candidates)} candidate lists for {len(stage1)} stage-1 passages; give one per passage")


def qdc_select(stage1: Sequence[Hit], candidates: Sequence[Sequence[Hit]], k: int) -> Selection:
    """Stage-1 passages, then the first new candidate of each stage-1 passage in turn, up to ``k`` in all."""
    _check_lists(stage1, candidates)
    sel = Selection("qdc", picks=_stage1_picks(stage1)[:k])
    chosen = {p.id for p in sel.picks}
    anchors = [h.passage for h in stage1[: len(sel.picks)]]
    cursor = [0] * len(anchors)
    progress = True
    while len(sel.picks) < k and progress:
        progress = False
        for i, anchor in enumerate(anchors):
            if len(sel.picks) >= k:
                break
            pool = candidates[i]
            while cursor[i] < len(pool) and pool[cursor[i]].passage.id in chosen:
                cursor[i] += 1
            if cursor[i] < len(pool):
                hit = pool[cursor[i]]
                cursor[i] += 1
                chosen.add(hit.passage.id)
                sel.picks.append(Pick(hit, 2, f"stage 2: first new passage (rank {hit.rank}) for question + "
                                              f"'{anchor.title}'", anchor.id))
                progress = True
    if len(sel.picks) < k:
        sel.notes.append(f"the candidate lists ran out: {len(sel.picks)} of {k} passages")
    return sel


def cfs_select(stage1: Sequence[Hit], candidates: Sequence[Sequence[Hit]], k: int, scorer: Scorer) -> Selection:
    """Stage-1 passages, then for each in turn the first candidate the scorer accepts as its pair.

    The k - k1 stage-2 places are dealt to the stage-1 passages in turn (with k1 = k/2, as in the
    paper, one each); a stage-1 passage whose candidates all fail leaves its place empty, which is
    why CFS often gives the model fewer than ``k`` passages. A candidate already chosen is passed
    over without asking the scorer; a rejected one is recorded in ``dropped`` (unless another
    stage-1 passage accepts it)."""
    _check_lists(stage1, candidates)
    sel = Selection("cfs", picks=_stage1_picks(stage1)[:k])
    chosen = {p.id for p in sel.picks}
    anchors = [h.passage for h in stage1[: len(sel.picks)]]
    if not anchors:
        return sel
    places = [0] * len(anchors)
    for slot in range(k - len(sel.picks)):
        places[slot % len(anchors)] += 1
    cursor = [0] * len(anchors)
    done = [n == 0 for n in places]
    rejected: dict[str, list[str]] = {}
    while not all(done):
        for i, anchor in enumerate(anchors):
            if done[i]:
                continue
            pool = candidates[i]
            accepted = None
            while cursor[i] < len(pool):
                hit = pool[cursor[i]]
                cursor[i] += 1
                if hit.passage.id in chosen:
                    continue
                probability, ok = scorer(anchor, hit.passage)
                sel.verdicts.append(Verdict(anchor.id, hit.passage.id, float(probability), bool(ok)))
                if ok:
                    accepted = (hit, probability)
                    break
                rejected.setdefault(hit.passage.id, []).append(anchor.id)
            places[i] -= 1
            done[i] = accepted is None or places[i] == 0
            if accepted is None:
                continue
            hit, probability = accepted
            chosen.add(hit.passage.id)
            sel.picks.append(Pick(hit, 2, f"stage 2: accepted with '{anchor.title}' (p = {probability:.2f}), "
                                          f"rank {hit.rank} for question + that passage", anchor.id))
    for pid, by in rejected.items():
        if pid not in chosen:
            sel.dropped.append({"id": pid, "reason": "stage 2: rejected as a pair with " + ", ".join(by)})
    return sel


def cis_select(picks: Sequence[Pick], scorer: Scorer, *, fallback: str = "best-pair") -> Selection:
    """Drop every passage whose pairs with all the others are rejected.

    With a single passage there is no pair to judge and it stays. When every passage would go,
    ``fallback`` decides: ``best-pair`` keeps the two passages of the most probable pair (said so
    in the notes), ``none`` keeps nothing."""
    if fallback not in CIS_FALLBACKS:
        raise ValueError(f"fallback must be one of {CIS_FALLBACKS}, got {fallback!r}")
    sel = Selection("cis")
    picks = list(picks)
    if len(picks) < 2:
        sel.picks = [Pick(p.hit, p.stage, p.reason + "; no pair to judge", p.anchor) for p in picks]
        return sel
    support: dict[str, list[tuple[str, float]]] = {p.id: [] for p in picks}
    for x, y in combinations(picks, 2):
        probability, ok = scorer(x.hit.passage, y.hit.passage)
        sel.verdicts.append(Verdict(x.id, y.id, float(probability), bool(ok)))
        if ok:
            support[x.id].append((y.id, probability))
            support[y.id].append((x.id, probability))
    for p in picks:
        if support[p.id]:
            partners = ", ".join(f"{pid} (p = {prob:.2f})" for pid, prob in support[p.id])
            sel.picks.append(Pick(p.hit, p.stage, f"{p.reason}; accepted in a pair with {partners}", p.anchor))
        else:
            sel.dropped.append({"id": p.id, "reason": f"every pair with the other {len(picks) - 1} passages was "
                                                      "rejected"})
    if not sel.picks and fallback == "best-pair":
        best = max(sel.verdicts, key=lambda v: v.probability)
        keep = {best.a, best.b}
        sel.picks = [Pick(p.hit, p.stage, f"{p.reason}; kept as half of the most probable pair "
                                          f"(p = {best.probability:.2f}) because every pair was rejected", p.anchor)
                     for p in picks if p.id in keep]
        sel.dropped = [d for d in sel.dropped if d["id"] not in keep]
        sel.notes.append("CIS rejected every pair; the most probable pair is kept instead of no passage at all")
    elif not sel.picks:
        sel.notes.append("CIS rejected every pair; no passage is kept")
    return sel
