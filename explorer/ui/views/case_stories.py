"""Captions of the recorded case studies: what each paper's figure shows, what the model did on the
same question, whether that is the paper's story, and the one thing to look at.

A recorded run is only worth showing if a visitor knows what to look for and whether the small
model behaved like the paper's. Each gallery item has a :class:`CaseStory`: the paper's figure in
the project's own words (fixed prose), and a function that reads the recorded trace and returns

- **facts**: sentences computed from the trace (which token fired, what was searched, where the
  gold passages came back, whether the answer matches gold under the evaluation's normalisation),
  so recording the gallery again can never make a caption state something the run did not do;
- **beats**: the steps of the paper's story, each with the test of the trace that shows it, so
  the caption says plainly which steps this run reproduces and which it does not;
- **claims**: the few sentences that are not simple facts (why an answer went wrong), each with
  its test; a claim the trace does not bear out is left out (and the gallery's tests fail);
- **look**: the element of the rendered run to highlight (a token, a passage, a filter verdict,
  a re-ranking), addressed by the data attributes the panels put on it.

Rendering is :mod:`explorer.ui.panels.case_story`. Nothing here recomputes a signal: every number
is read from the trace's events.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from explorer import naming
from explorer.eval.metrics import contains_answer, normalize_answer
from explorer.eval.scores import CONTAINS_GOLD, answer_verdict
from explorer.trace import Event, Trace
from explorer.ui.views.html import fmt, short


@dataclass(frozen=True)
class Check:
    """A sentence and whether the trace makes it true."""

    text: str
    holds: bool


@dataclass(frozen=True)
class Look:
    """The element of a rendered run a caption points at.

    ``chain`` is a path of data attributes from the run's ``<article data-run>`` down to the element
    (each step may be any number of levels deeper), e.g. ``(("data-panel", "strip"), ("data-span",
    "1"), ("data-i", "20"))``; the page script turns it into a selector, the tests walk it in the
    rendered HTML."""

    label: str
    run_id: str
    chain: tuple[tuple[str, str], ...]

    def path(self) -> list[list[str]]:
        return [["data-run", self.run_id], *[[name, value] for name, value in self.chain]]


@dataclass
class Told:
    """What a story function read from one recorded run."""

    facts: list[str] = field(default_factory=list)
    beats: list[Check] = field(default_factory=list)
    claims: list[Check] = field(default_factory=list)
    look: Look | None = None


@dataclass(frozen=True)
class CaseStory:
    """The caption record of one gallery item (``key`` = ``case-method``)."""

    key: str
    paper: str
    figure: str
    #: What the paper's figure shows, in the project's words.
    story: str
    #: Reads a recorded trace (and the run shown beside it, if any) into facts, beats, claims and a look.
    tell: Callable[[Trace, Trace | None], Told]


@dataclass(frozen=True)
class Caption:
    """A story told for one recorded trace: what the panel renders."""

    key: str
    title: str
    model: str
    paper: str
    figure: str
    story: str
    facts: list[str]
    beats: list[Check]
    claims: list[Check]
    look: Look | None

    @property
    def verdict(self) -> str:
        """Whether this run reproduces the paper's story, said plainly."""
        if not self.beats:
            return "This run is a baseline for the others; the paper's figure has no such run to reproduce."
        shown = [b.text for b in self.beats if b.holds]
        missed = [b.text for b in self.beats if not b.holds]
        if not missed:
            return "Yes: " + "; ".join(shown) + "."
        if not shown:
            return "No. Not reproduced: " + "; ".join(missed) + "."
        return "Partly. Reproduced: " + "; ".join(shown) + ". Not reproduced: " + "; ".join(missed) + "."


# -- reading a trace ---------------------------------------------------------------------------

def quote(text: Any, width: int = 120) -> str:
    """Model or corpus text as the caption quotes it: one line, bounded, in typographic quotes."""
    shown = short(str(text or "").strip(), width)
    return f"“{shown}”" if shown else "“” (nothing)"


def gold_ids(trace: Trace) -> list[str]:
    gold = trace.gold if isinstance(trace.gold, dict) else {}
    return [str(p) for p in gold.get("gold_passages") or []]


def gold_answers(trace: Trace) -> list[str]:
    gold = trace.gold if isinstance(trace.gold, dict) else {}
    return [str(a) for a in gold.get("answers") or []]


def hits(event: Event) -> list[dict[str, Any]]:
    return [h for h in event.payload.get("hits") or [] if isinstance(h, dict)]


def hit_ids(event: Event) -> list[str]:
    return [str(h.get("id")) for h in hits(event)]


def rank_of(event: Event, pid: str) -> int | None:
    return next((int(h.get("rank") or n) for n, h in enumerate(hits(event), 1) if str(h.get("id")) == pid), None)


def retrieved(trace: Trace) -> set[str]:
    return {pid for e in trace.of_kind("retrieval") for pid in hit_ids(e)}


def title_of(trace: Trace, pid: str) -> str:
    for e in trace.of_kind("retrieval"):
        for h in hits(e):
            if str(h.get("id")) == pid:
                return str(h.get("title") or pid)
    return pid


def answer_passages(trace: Trace) -> list[str]:
    """The gold passages whose text states a gold answer (the arena's capacity, the actress's name)."""
    answers = gold_answers(trace)
    out = []
    for pid in gold_ids(trace):
        text = next((f"{h.get('title', '')} {h.get('text', '')}" for e in trace.of_kind("retrieval")
                     for h in hits(e) if str(h.get("id")) == pid), "")
        if text and contains_answer(text, answers):
            out.append(pid)
    return out


def retrieval_name(event: Event) -> str:
    """A search as the page names it (``retrieval 5``: its event number, :mod:`explorer.naming`)."""
    return naming.event("retrieval", event.id)


def retrieval_after(trace: Trace, event_id: int) -> Event | None:
    return next((e for e in trace.of_kind("retrieval") if e.id > event_id), None)


def matches_gold(trace: Trace) -> bool:
    verdict = answer_verdict(trace)
    return verdict is not None and verdict.matches


def answer_fact(trace: Trace) -> str:
    """The answer against the gold answers, judged as the evaluation judges it."""
    verdict = answer_verdict(trace)
    gold = gold_answers(trace)
    if verdict is None:
        return "It gave no answer." if trace.answer is None else f"Its answer is {quote(trace.answer)}."
    judged = {"exact match": "right (an exact match)", CONTAINS_GOLD: "right (the gold answer inside a longer one)",
              "right": "right"}.get(verdict.label)
    if judged is None:
        judged = f"partly right ({verdict.label})" if verdict.kind == "part" else "wrong"
    return f"Its answer, {quote(trace.answer, 60)}, is {judged}; the gold answer is {gold[0] if gold else '?'}."


def gold_fact(trace: Trace) -> str:
    """Where each gold passage first came back (retrieval and rank), and how many never did."""
    gold = gold_ids(trace)
    searches = trace.of_kind("retrieval")
    if not searches:
        return "It never searched."
    found = []
    for pid in gold:
        first = next((e for e in searches if pid in hit_ids(e)), None)
        if first is not None:
            found.append((first.id, rank_of(first, pid) or 0, title_of(trace, pid)))
    missing = len(gold) - len(found)
    if not found:
        return f"None of its {len(searches)} searches returned a gold passage."
    text = "Gold passages retrieved: " + ", ".join(f"{quote(title, 60)} (retrieval {n}, rank {rank})"
                                                   for n, rank, title in sorted(found))
    return text + (f"; {missing} gold passage{'s' if missing > 1 else ''} never came back." if missing else ".")


def first_trigger(trace: Trace) -> Event | None:
    return next(iter(trace.of_kind("trigger")), None)


def token_text(token: Any) -> str:
    text = str(token or "")
    return text.strip() or repr(text)


def span_tokens(trace: Trace, span: int) -> list[dict[str, Any]]:
    event = trace.events[span] if 0 <= span < len(trace.events) else None
    if event is None or event.kind != "generation":
        return []
    return [t for t in event.payload.get("tokens") or [] if isinstance(t, dict)]


def token_look(trace: Trace, span: int, index: int, label: str) -> Look:
    return Look(label, trace.run_id, (("data-panel", "strip"), ("data-span", str(span)), ("data-i", str(index))))


def passage_look(trace: Trace, retrieval: Event, pid: str, label: str) -> Look:
    return Look(label, trace.run_id, (("data-panel", "retrievals"), ("data-retrieval", str(retrieval.id)),
                                      ("data-passage", pid)))


def _passage_words(hit: dict[str, Any]) -> str:
    return normalize_answer(f"{hit.get('title', '')} {hit.get('text', '')}")


def _numbers(text: str) -> list[str]:
    return re.findall(r"\d[\d,.]*\d|\d", text)


# -- the stories -------------------------------------------------------------------------------

def _opened_with_first_draft(trace: Trace) -> Told:
    """A story that opens with the run's first draft (the span a method checks while it writes)."""
    told = Told()
    drafts = [e for e in trace.of_kind("generation") if e.payload.get("purpose") == "draft"]
    if drafts:
        told.facts.append(f"Its first draft: {quote(drafts[0].payload.get('text'), 160)}")
    return told


@dataclass(frozen=True)
class _TriggerWords:
    """How a story words a draft's trigger: the signal, the unit it fires on (token or word), the sentence when
    it never fired, how the query's sentence starts, what fired (for the look), and the value after the unit."""

    signal: str
    unit: str
    never: str
    searched: str
    fired: str
    value: Callable[[dict[str, Any]], str]


_DRAGIN_WORDS = _TriggerWords("RIND", "token", "RIND never went over θ, so DRAGIN never searched.",
                              "QFS searched with", "RIND fired", lambda p: f" (RIND = {fmt(p.get('value'))}).")
_ETC_WORDS = _TriggerWords("The entropy trend", "word", "The entropy trend never went over θ, so ETC never searched.",
                           "It searched with the words the flagged word attends to:", "the trend fired",
                           lambda p: f": its attention x smoothed second difference of the entropy was "
                                     f"{fmt(p.get('value'))} (entropy {fmt(p.get('entropy'))}).")


def _tell_trigger(told: Told, trace: Trace, trig: Event | None, kept: str | None, words: _TriggerWords) -> None:
    """A draft's first trigger (or that there was none), where the draft was cut (``kept``: the text kept), the
    query searched, and the look at the token or word that fired."""
    if trig is None:
        told.facts.append(words.never)
        return
    p = trig.payload
    told.facts.append(f"{words.signal} first went over θ = {fmt(p.get('threshold'))} at the {words.unit} "
                      f"{quote(token_text(p.get('token')), 30)}{words.value(p)}")
    if kept is not None:
        told.facts.append(f"The draft was cut before that {words.unit}, keeping {quote(kept, 160)}.")
    query = next((e for e in trace.of_kind("query") if e.id > trig.id), None)
    if query is not None:
        told.facts.append(f"{words.searched} {quote(query.payload.get('text'), 160)}.")
    told.look = token_look(trace, int(p["span"]), int(p["token_index"]),
                           f"the {words.unit} {quote(token_text(p.get('token')), 30)} where {words.fired}")


def _dragin(trace: Trace, _beside: Trace | None) -> Told:
    told = _opened_with_first_draft(trace)
    trig = first_trigger(trace)
    cut = next(iter(trace.of_kind("truncation")), None)
    after = retrieval_after(trace, trig.id) if trig is not None else None
    answer_ids = answer_passages(trace)
    _tell_trigger(told, trace, trig, cut.payload.get("kept_text") if cut is not None else None, _DRAGIN_WORDS)
    told.facts += [gold_fact(trace), answer_fact(trace)]
    told.beats = [
        Check("RIND fires inside the capacity the model made up",
              trig is not None and bool(re.search(r"\d", str(trig.payload.get("token") or "")))),
        Check("the query brings back the passage that states the capacity",
              after is not None and any(pid in hit_ids(after) for pid in answer_ids)),
        Check("the rewritten sentence gives the right capacity", matches_gold(trace)),
    ]
    kept = str(cut.payload.get("kept_text") or "").rstrip() if cut is not None else ""
    told.claims = [Check("The cut keeps the first digit of the made-up number, so the model finishes that number "
                         "instead of reading the capacity from the passage.",
                         bool(kept) and kept[-1].isdigit() and not matches_gold(trace)
                         and str(trace.answer or "").startswith(kept[-1]))]
    return told


def _under_threshold(trace: Trace, trig: Event | None) -> list[str]:
    """The eligible units of the check that fired ``trig`` on the firing side of its threshold (their text)."""
    if trig is None:
        return []
    check = next((e for e in trace.of_kind("check") if e.payload.get("span") == trig.payload.get("span")
                  and e.payload.get("fired") is not None), None)
    if check is None:
        return [token_text(trig.payload.get("token"))]
    theta, compare = check.payload.get("threshold"), check.payload.get("compare", "<")
    if not isinstance(theta, (int, float)):
        return []
    out = []
    for unit in check.payload.get("units") or []:
        value = unit.get("value")
        if unit.get("eligible", True) and isinstance(value, (int, float)) and (
                value < theta if compare == "<" else value > theta):
            out.append(token_text(unit.get("text")))
    return out


def _flare(trace: Trace, _beside: Trace | None) -> Told:
    told = Told()
    trig = first_trigger(trace)
    masked = next((e for e in trace.of_kind("query") if "masked" in e.payload), None)
    searched = retrieval_after(trace, masked.id) if masked is not None else None
    answer_ids = answer_passages(trace)
    if trace.config.get("initial_retrieval"):
        first_search = next(iter(trace.of_kind("retrieval")), None)
        named = f" ({retrieval_name(first_search)})" if first_search is not None else ""
        told.facts.append(f"As FLARE does, it first searched with the question itself{named}.")
    if trig is None:
        told.facts.append(f"No token of its look-ahead sentences fell under θ = {fmt(trace.config.get('threshold'))}, "
                          "so FLARE never searched again.")
    else:
        p = trig.payload
        sentence = masked.payload.get("sentence") if masked is not None else ""
        told.facts.append(f"In the look-ahead sentence {quote(sentence, 140)} the token "
                          f"{quote(token_text(p.get('token')), 30)} had probability {fmt(p.get('value'))}, under "
                          f"θ = {fmt(p.get('threshold'))}, so FLARE fired.")
        told.look = token_look(trace, int(p["span"]), int(p["token_index"]),
                               f"the token {quote(token_text(p.get('token')), 30)} that fired FLARE")
    if masked is not None:
        removed = ", ".join(quote(m, 30) for m in masked.payload.get("masked") or []) or "nothing"
        told.facts.append(f"It searched with {quote(masked.payload.get('text'), 140)} (removed: {removed}).")
    if searched is not None:
        titles = ", ".join(f"{quote(h.get('title'), 40)}" for h in hits(searched)) or "nothing"
        told.facts.append(f"That search ({retrieval_name(searched)}) returned {titles}.")
    told.facts += [gold_fact(trace), answer_fact(trace)]
    answer = normalize_answer(str(trace.answer or ""))
    stated = [h for e in trace.of_kind("retrieval") for h in hits(e) if str(h.get("id")) in answer_ids]
    told.claims = [Check("That answer is the other figure the arena's passage gives, the capacity with standing "
                         "room, not the seated one the question asks for.",
                         bool(answer) and not matches_gold(trace)
                         and any(f" {answer} " in f" {_passage_words(h)} " for h in stated))]
    under = _under_threshold(trace, trig)
    if trig is not None:  # said right after the sentence that fired
        told.facts.insert(2 if trace.config.get("initial_retrieval") else 1,
                          f"{len(under)} token{'s' if len(under) != 1 else ''} of that sentence "
                          f"{'were' if len(under) != 1 else 'was'} under θ"
                          + (f": {', '.join(quote(u, 20) for u in under)}." if under else "."))
    later = [e for e in trace.of_kind("retrieval") if searched is not None and e.id > searched.id]
    returned_later = [e for e in later if any(pid in hit_ids(e) for pid in answer_ids)]
    if searched is not None and returned_later and not any(pid in hit_ids(searched) for pid in answer_ids):
        told.facts.append(f"A later search ({retrieval_name(returned_later[0])}) did return the passage that states "
                          "the capacity.")
    told.beats = [
        Check("several tokens of FLARE's first sentence are improbable (under θ), so it fires", len(under) > 1),
        Check("its query drops those words", masked is not None and len(masked.payload.get("masked") or []) > 1),
        Check("that query misses the passage that states the capacity, and no later search brings it back",
              searched is not None and not any(pid in hit_ids(e) for e in [searched, *later] for pid in answer_ids)),
        Check("FLARE's answer is wrong", not matches_gold(trace)),
    ]
    return told


def _without_retrieval(trace: Trace, _beside: Trace | None) -> Told:
    told = Told()
    made_up = [n for n in _numbers(str(trace.output or ""))
               if normalize_answer(n) not in {normalize_answer(a) for a in gold_answers(trace)}]
    told.facts.append(f"With no passage it wrote: {quote(trace.output, 200)}")
    told.facts.append(answer_fact(trace))
    told.beats = [Check("without retrieval the model states a capacity of its own making", bool(made_up)),
                  Check("and its answer is wrong", not matches_gold(trace))]
    for gen in trace.of_kind("generation"):
        index = next((i for i, t in enumerate(span_tokens(trace, gen.id)) if re.search(r"\d", str(t.get("text")))),
                     None)
        if index is not None and made_up:
            told.look = token_look(trace, gen.id, index, f"where the made-up number {quote(made_up[0], 20)} begins")
            break
    return told


def _single(trace: Trace, _beside: Trace | None) -> Told:
    told = Told()
    search = next(iter(trace.of_kind("retrieval")), None)
    told.facts.append(f"It searched once, with the question, before writing: {quote(trace.output, 200)}")
    told.facts += [gold_fact(trace), answer_fact(trace)]
    target = next((pid for pid in answer_passages(trace) if search is not None and pid in hit_ids(search)), None)
    if search is not None and target is not None:
        told.look = passage_look(trace, search, target, f"the passage {quote(title_of(trace, target), 50)}, "
                                                        f"{retrieval_name(search)}, rank {rank_of(search, target)}")
    return told


def _seakr(trace: Trace, _beside: Trace | None) -> Told:
    told = Told()
    checks = trace.of_kind("check")
    first = checks[0] if checks else None
    if first is not None:
        unit = (first.payload.get("units") or [{}])[0]
        over = first.payload.get("fired") is not None
        query = next((e for e in trace.of_kind("query") if e.id > first.id), None) if over else None
        then = f"over δ, so it searched with {quote(query.payload.get('text'), 60)}" if query is not None else (
            "not over δ, so it did not search")
        told.facts.append(f"Its first pseudo-generation, {quote(unit.get('text'), 100)}, had U = "
                          f"{fmt(unit.get('value'))} against δ = {fmt(first.payload.get('threshold'))}: {then}.")
    fired = [c for c in checks if c.payload.get("fired") is not None]
    told.facts.append(f"U was over δ at {len(fired)} of its {len(checks)} reasoning steps.")
    mentions = [h for e in trace.of_kind("retrieval") for h in hits(e) if "jodorowsky" in
                f"{h.get('title', '')} {h.get('text', '')}".lower()]
    told.facts.append("No passage it retrieved mentions Jodorowsky." if not mentions else
                      f"{len(mentions)} retrieved passage(s) mention Jodorowsky.")
    reranks = trace.of_kind("rerank")
    gold = set(gold_ids(trace))
    for r in reranks[:2]:
        cands = [c for c in r.payload.get("candidates") or [] if isinstance(c, dict)]
        kept = next((c for c in cands if c.get("id") == r.payload.get("chosen")), None)
        if kept is None:
            continue
        others = ", ".join(f"{quote(c.get('title'), 40)} {fmt(c.get('value'))}" for c in cands if c is not kept)
        told.facts.append(f"Re-ranking by U kept {quote(kept.get('title'), 40)} (U = {fmt(kept.get('value'))}, "
                          f"search rank {kept.get('rank')}) over {others or 'nothing else'}.")
    choice = next(iter(trace.of_kind("choice")), None)
    if choice is not None:
        options = [o for o in choice.payload.get("options") or [] if isinstance(o, dict)]
        answers = gold_answers(trace)
        said = " and ".join(f"from its {o.get('strategy')} {quote(o.get('answer'), 40)} (U = {fmt(o.get('value'))}, "
                         f"{'right' if contains_answer(str(o.get('answer') or ''), answers) else 'wrong'})"
                         for o in options)
        told.facts.append(f"It wrote two final answers, {said}, and kept the {choice.payload.get('chosen')} one, "
                          "whose U is lower.")
    told.facts.append(answer_fact(trace))
    if reranks:
        told.look = Look(f"the re-ranking of {retrieval_name(trace.events[reranks[0].payload['retrieval']])}"
                         " by U", trace.run_id, (("data-panel", "uncertainty"), ("data-rerank", str(reranks[0].id))))
    delta = first.payload.get("threshold") if first is not None else None
    with_passages = [e for e in trace.of_kind("uncertainty") if e.payload.get("context") == "rerank"
                     and e.payload.get("primary", True) is not False
                     and isinstance(e.payload.get("value"), (int, float))]
    still_over = [e for e in with_passages if isinstance(delta, (int, float)) and e.payload["value"] > delta]
    if with_passages and isinstance(delta, (int, float)):  # before the answer, after the re-ranking
        told.facts.insert(len(told.facts) - 1, "With each candidate passage in, U was "
                          + ", ".join(fmt(e.payload["value"]) for e in with_passages)
                          + f": {len(still_over)} of {len(with_passages)} stayed over δ = {fmt(delta)}.")
    told.beats = [
        Check("U is over δ before the passages, so SEAKR searches", bool(fired) and fired[0].id == checks[0].id),
        Check("U is under δ with each passage in, so it searches only while it lacks knowledge",
              bool(with_passages) and not still_over and len(fired) < len(checks)),
        Check("the searches bring back the dates of both men", bool(gold) and gold <= retrieved(trace)),
        Check("re-ranking by U keeps a passage with the needed dates",
              any(r.payload.get("chosen") in gold for r in reranks)),
        Check("the final answer is right", matches_gold(trace)),
    ]
    return told


def _blendfilter(trace: Trace, _beside: Trace | None) -> Told:
    told = Told()
    gold = gold_ids(trace)
    sets = {str(e.payload.get("set")): e for e in trace.of_kind("retrieval") if e.payload.get("set")}
    external = next((e for e in trace.of_kind("generation") if e.payload.get("purpose") == "augment"), None)
    if external is not None:
        text = str(external.payload.get("text") or "").strip()
        told.facts.append("Its external augmentation (an answer from the first passages) came back empty, so that "
                          "query was the question alone." if not text else
                          f"Its external augmentation (an answer from the first passages) was {quote(text, 80)}.")
    found = ", ".join(f"{name} {sum(1 for g in gold if g in hit_ids(e))}/{len(gold)}" for name, e in sets.items())
    if found:
        told.facts.append(f"Gold passages found by each query: {found}.")
    filters = trace.of_kind("filter")
    dropped_gold, kept_gold, dropped_other = [], [], 0
    for f in filters:
        kept = {str(k) for k in f.payload.get("kept") or []}
        for pid in (str(i) for i in f.payload.get("passage_ids") or []):
            if pid in gold:
                (kept_gold if pid in kept else dropped_gold).append((f, pid))
            elif pid not in kept:
                dropped_other += 1
    if filters:
        lost = sorted({title_of(trace, pid) for _, pid in dropped_gold})
        told.facts.append(f"The filter kept the gold passages it saw {len(kept_gold)} times and dropped them "
                          f"{len(dropped_gold)} times{' (' + ', '.join(lost) + ')' if lost else ''}; it dropped "
                          f"{dropped_other} other passages.")
    union = next(iter(trace.of_kind("selection")), None)
    if union is not None:
        titles = ", ".join(title_of(trace, str(p)) for p in union.payload.get("passage_ids") or [])
        told.facts.append(f"It answered from the union: {titles or 'no passage'}.")
    told.facts.append(answer_fact(trace))
    original = set(hit_ids(sets["original"])) if "original" in sets else set()
    internal = set(hit_ids(sets["internal"])) if "internal" in sets else set()
    told.beats = [
        Check("the model's own knowledge (the internal query) finds a gold passage the question alone misses",
              any(g in internal and g not in original for g in gold)),
        Check("the filter keeps the gold passages and drops irrelevant ones",
              bool(kept_gold) and not dropped_gold and dropped_other > 0),
        Check("the answer from the filtered union is right", matches_gold(trace)),
    ]
    named = [pid for pid in gold if contains_answer(title_of(trace, pid), gold_answers(trace))]
    target = next(((f, pid) for f, pid in dropped_gold), None) or next(
        ((f, pid) for f, pid in reversed(kept_gold) if pid in named), None) or next(reversed(kept_gold), None)
    if target is not None:
        f, pid = target
        verdict = "dropped" if (f, pid) in dropped_gold else "kept"
        told.look = Look(f"the filter's verdict on {quote(title_of(trace, pid), 40)} in the {f.payload.get('set')} "
                         f"set ({verdict})", trace.run_id,
                         (("data-panel", "filter"), ("data-filter", str(f.id)), ("data-passage", pid)))
    answers = [e for e in trace.of_kind("generation") if e.payload.get("purpose") == "answer"]
    first_line = str(answers[0].payload.get("text") or "").strip().split("\n")[0] if answers else ""
    told.claims = [Check("Its answer starts with the right name on its first line, then keeps listing names; it "
                         "never wrote “so the answer is”, so a second call completed that phrase and picked another.",
                         len(answers) > 1 and contains_answer(first_line, gold_answers(trace)) == 1.0
                         and "answer is" not in str(answers[0].payload.get("text")).lower()
                         and not matches_gold(trace))]
    return told


def _stage(trace: Trace, stage: int) -> list[Event]:
    return [e for e in trace.of_kind("retrieval") if e.payload.get("stage") == stage
            or (e.payload.get("stage") is None and isinstance(e.payload.get("query"), int)
                and trace.events[e.payload["query"]].payload.get("stage") == stage)]


def _drrag(trace: Trace, beside: Trace | None) -> Told:
    told = Told()
    gold = gold_ids(trace)
    first, second = _stage(trace, 1), _stage(trace, 2)
    stage1 = {pid for e in first for pid in hit_ids(e)}
    if first:
        told.facts.append("Stage 1, the question alone, found " + ", ".join(
            quote(title_of(trace, pid), 40) for pid in hit_ids(first[0])) + ".")
    hop: tuple[Event, str] | None = None
    for e in second:
        for pid in hit_ids(e):
            if pid in gold and pid not in stage1 and hop is None:
                hop = (e, pid)
    if hop is not None:
        e, pid = hop
        anchor = trace.events[e.payload["query"]].payload.get("anchor") if isinstance(e.payload.get("query"), int) \
            else None
        told.facts.append(f"Stage 2, the question joined to {quote(title_of(trace, str(anchor)), 40)}, found "
                          f"{quote(title_of(trace, pid), 40)} at rank {rank_of(e, pid)} "
                          f"({retrieval_name(e)}).")
        told.look = passage_look(trace, e, pid, f"{quote(title_of(trace, pid), 40)} in the second stage, "
                                                f"{retrieval_name(e)}, rank {rank_of(e, pid)}")
        judged = [c for c in trace.of_kind("classifier") if pid in [str(x) for x in c.payload.get("pair") or []]]
        took = next((c for c in trace.of_kind("classifier") if str((c.payload.get("pair") or [""])[0]) == str(anchor)
                     and c.payload.get("accepted")), None)
        if not judged and took is not None:
            other = str((took.payload.get("pair") or ["", ""])[1])
            told.facts.append(f"For that passage the classifier accepted {quote(title_of(trace, other), 40)} "
                              f"(p = {fmt(took.payload.get('probability'))}), a candidate ranked before "
                              f"{quote(title_of(trace, pid), 40)}, so forward selection took it and never judged "
                              f"{quote(title_of(trace, pid), 40)}.")
    selection = next(iter(trace.of_kind("selection")), None)
    chosen = [str(p) for p in selection.payload.get("passage_ids") or []] if selection is not None else []
    if selection is not None:
        told.facts.append(f"The classifier's selection ({selection.payload.get('strategy', '?')}) gave the model: "
                          + ", ".join(quote(title_of(trace, p), 40) for p in chosen) + ".")
    told.facts.append(answer_fact(trace))
    if beside is not None:
        told.facts.append(f"Beside it, one search with the question (SR-RAG) on the same model answered "
                          f"{quote(beside.answer, 40)}: "
                          f"{'right' if matches_gold(beside) else 'wrong'}.")
    told.beats = [
        Check("the question alone finds the first hop", any(g in stage1 for g in gold)),
        Check("the question joined to that passage finds the second hop, which the question alone misses",
              hop is not None),
        Check("the classifier selects both hops for the answer", bool(gold) and set(gold) <= set(chosen)),
        Check("the answer is right", matches_gold(trace)),
    ]
    return told


def _traditional(trace: Trace, _beside: Trace | None) -> Told:
    told = _single(trace, None)
    gold = set(gold_ids(trace))
    answer = normalize_answer(str(trace.answer or ""))
    search = next(iter(trace.of_kind("retrieval")), None)
    source = next((h for h in (hits(search) if search is not None else [])
                   if str(h.get("id")) not in gold and answer and f" {answer} " in f" {_passage_words(h)} "), None)
    told.beats = [Check("one search with the question misses the second hop", not gold <= retrieved(trace)),
                  Check("an irrelevant passage leads the answer astray",
                        source is not None and not matches_gold(trace))]
    if search is not None and source is not None:
        told.look = passage_look(trace, search, str(source["id"]), f"{quote(source.get('title'), 40)}, where the "
                                                                     f"answer {quote(trace.answer, 40)} came from")
    return told


def _kept_before_trigger(trace: Trace) -> str | None:
    """The draft text a method kept before its first retrieval (None when it never cut a draft)."""
    cut = next(iter(trace.of_kind("truncation")), None)
    return str(cut.payload.get("kept_text") or "") if cut is not None else None


def _beside_dragin(beside: Trace | None) -> tuple[str, str | None]:
    """DRAGIN's decision on the same question, as a fact, and the draft text it kept before searching."""
    if beside is None:
        return "", None
    trig = first_trigger(beside)
    if trig is None:
        return "Beside it, DRAGIN's RIND never went over θ, so DRAGIN never searched.", None
    return (f"Beside it, DRAGIN fired at the token {quote(token_text(trig.payload.get('token')), 30)} "
            f"(RIND = {fmt(trig.payload.get('value'))} over θ = {fmt(trig.payload.get('threshold'))})."), \
        _kept_before_trigger(beside)


def _close_beside_dragin(told: Told, trace: Trace, beside: Trace | None) -> str | None:
    """End the facts of a newer method's story told beside DRAGIN's run: DRAGIN's decision, the gold, the answer.

    Returns the draft text DRAGIN kept before it searched (None: it did not search, or there is no run beside).
    """
    dragin_fact, dragin_kept = _beside_dragin(beside)
    if dragin_fact:
        told.facts.append(dragin_fact)
    told.facts += [gold_fact(trace), answer_fact(trace)]
    return dragin_kept


def _etc(trace: Trace, beside: Trace | None) -> Told:
    told = _opened_with_first_draft(trace)
    trig = first_trigger(trace)
    kept = _kept_before_trigger(trace)
    _tell_trigger(told, trace, trig, kept, _ETC_WORDS)
    dragin_kept = _close_beside_dragin(told, trace, beside)
    after = retrieval_after(trace, trig.id) if trig is not None else None
    told.beats = [
        Check("ETC searches at another point of the answer than DRAGIN",
              beside is not None and (kept or None) != (dragin_kept or None)),
        Check("its query brings back a gold passage",
              after is not None and any(pid in hit_ids(after) for pid in gold_ids(trace))),
        Check("the answer is right", matches_gold(trace)),
    ]
    if beside is not None and kept is not None and dragin_kept is not None and len(kept) < len(dragin_kept):
        told.claims = [Check("ETC retrieves earlier in the answer than DRAGIN, before any digit of the capacity "
                             "is written.", not re.search(r"\d", kept))]
    return told


def _targ(trace: Trace, beside: Trace | None) -> Told:
    told = Told()
    check = next(iter(trace.of_kind("check")), None)
    draft = next(iter(trace.of_kind("generation")), None)
    if draft is not None:
        told.facts.append(f"Its short draft without passages: {quote(draft.payload.get('text'), 160)}")
    opened = check is not None and check.payload.get("fired") is not None
    if check is not None:
        unit = (check.payload.get("units") or [{}])[0]
        then = ("searched once, with the question, and wrote the answer with the passages" if opened
                else "answered without searching")
        if unit.get("gate") == "variance":
            scored = (f"The variance of the mean log-probability of its {len(unit.get('prefixes') or [])} sampled "
                      "prefixes")
        else:
            scored = f"The draft's {check.payload.get('signal')}"
        told.facts.append(f"{scored} was {fmt(unit.get('value'))}, "
                          f"{'over' if opened else 'not over'} τ = {fmt(check.payload.get('threshold'))}, so TARG "
                          f"{then}.")
    if draft is not None:
        told.look = token_look(trace, draft.id, 0, "the first token of the draft the gate scored")
    _close_beside_dragin(told, trace, beside)
    dragin_searched = beside is not None and beside.costs.retrievals > 0
    told.beats = [
        Check("TARG decides once, before writing, where DRAGIN decides while writing", beside is not None),
        Check("its decision differs from DRAGIN's (search or not)", beside is not None and opened != dragin_searched),
        Check("the answer is right", matches_gold(trace)),
    ]
    return told


def _dragin_story(method: str, tell: Callable[[Trace, Trace | None], Told], story: str, *,
                  figure: str = "appendix C") -> CaseStory:
    """A run of ``method`` (its registry name) on the question of DRAGIN's case study (appendix C)."""
    return CaseStory(f"dragin-{method}", "DRAGIN", figure, story, tell)


def _quote_end(text: Any, width: int = 80) -> str:
    """Model text quoted by its end (where a long answer states its answer), one line, bounded."""
    line = " ".join(str(text or "").split())
    return quote(line, width) if len(line) <= width else f"“…{line[-(width - 1):].lstrip()}”"


def _prober_reading(trace: Trace, check: Event, n: int) -> str:
    """One reading of Probing-RAG's prober as a sentence: the answer read, its layer, P against θ, what followed."""
    p = check.payload
    unit = (p.get("units") or [{}])[0]
    value, theta = unit.get("value"), p.get("threshold")
    over = isinstance(value, (int, float)) and isinstance(theta, (int, float)) and value > theta
    which = "its answer without passages" if n == 0 else f"its answer after search {n}"
    if p.get("fired") is not None:
        query = next((e for e in trace.of_kind("query") if e.id > check.id), None)
        if query is None:
            then = "so Probing-RAG searched"
        elif query.payload.get("source") == "question":
            then = "so Probing-RAG searched with the question"
        else:
            searched = _quote_end(query.payload.get("text"))
            then = f"so Probing-RAG searched with the {query.payload.get('source')}, {searched}"
    elif over:
        then = "but its searches were spent, so Probing-RAG kept that answer"
    else:
        then = "so Probing-RAG kept that answer"
    return (f"The prober read layer {p.get('layer')} of {which}, {_quote_end(unit.get('text'))}: P(needs retrieval) "
            f"= {fmt(value)}, {'over' if over else 'not over'} θ = {fmt(theta)}, {then}.")


def _probing_rag(trace: Trace, beside: Trace | None) -> Told:
    told = Told()
    checks = [e for e in trace.of_kind("check") if e.payload.get("signal") == "prober_p"]
    told.facts += [_prober_reading(trace, check, n) for n, check in enumerate(checks)]
    first = trace.events[int(checks[0].payload["span"])] if checks else None
    if first is not None and first.kind == "generation":
        told.look = token_look(trace, first.id, 0, "the first token of the answer the prober read first")
    searches = trace.costs.retrievals
    if beside is not None:
        told.facts.append(f"Probing-RAG searched {searches} time{'s' if searches != 1 else ''}, DRAGIN "
                          f"{beside.costs.retrievals} time{'s' if beside.costs.retrievals != 1 else ''}.")
    _close_beside_dragin(told, trace, beside)
    gold = gold_answers(trace)
    # (states the gold answer, P over θ, fired) for each answer the prober read
    read = [(contains_answer(str(unit.get("text") or ""), gold),
             isinstance(unit.get("value"), (int, float)) and unit["value"] > c.payload.get("threshold", 1.0),
             c.payload.get("fired") is not None)
            for c in checks for unit in (c.payload.get("units") or [{}])[:1]]
    right_over = [r for r in read if r[0] and r[1]]
    told.beats = [
        Check("Probing-RAG decides on whole answers, after writing them, where DRAGIN decides while writing",
              beside is not None and bool(checks) and all(c.payload.get("unit") == "answer" for c in checks)),
        Check("its decisions differ from DRAGIN's (how many searches)",
              beside is not None and searches != beside.costs.retrievals),
        Check("the prober flags the answer without passages, which does not state the gold answer",
              bool(read) and not read[0][0] and read[0][2]),
        Check("the prober keeps an answer once it states the gold answer",
              any(r[0] for r in read) and not right_over),
        Check("the answer is right", matches_gold(trace)),
    ]
    if right_over:
        told.claims = [Check("The prober's P stayed over θ on answers that state the gold answer, so Probing-RAG "
                             "searched again until its searches were spent.",
                             bool(read) and read[-1][1] and not read[-1][2])]
    return told


def _beside_dragin_story(method: str, arxiv: str, tell: Callable[[Trace, Trace | None], Told],
                         how: str) -> CaseStory:
    """A newer method's run on DRAGIN's case-study question, told beside DRAGIN's; ``how`` says how it decides."""
    return _dragin_story(method.lower(), tell, f"The same question with {method}, {how} DRAGIN's run on the same "
                         "question and model is shown beside it.", figure=f"appendix C ({method}, arXiv {arxiv})")


STORIES: dict[str, CaseStory] = {s.key: s for s in (
    _dragin_story("wo", _without_retrieval,
                  "The case study begins with what the model writes on its own: it names the arena where the "
                  "Lewiston Maineiacs played but invents its seating capacity. That made-up number is what DRAGIN "
                  "later catches."),
    _dragin_story("sr", _single,
                  "The paper's case study has no single-round run. One search with the question before writing "
                  "(SR-RAG) is the baseline of the paper's tables; it is here so the dynamic runs can be set "
                  "against it."),
    _dragin_story("flare", _flare,
                  "The paper sets FLARE beside DRAGIN on the same question: several tokens of FLARE's first "
                  "sentence (the town, the arena's name) are improbable, so it fires there and searches with that "
                  "sentence minus those words. The query loses what the model needed, brings back nothing useful, "
                  "and the answer is wrong."),
    _dragin_story("dragin", _dragin,
                  "The model's first draft names the arena but invents its capacity. RIND (a token's uncertainty "
                  "weighted by how much later tokens attend to it) rises over θ on that number; QFS then builds a "
                  "query from the words the model attends to at that moment (the arena, “seating capacity”). The "
                  "query brings back the arena's article, and the rewritten sentence gives the right capacity, "
                  "3,677."),
    CaseStory("seakr-seakr", "SEAKR", "table 5",
              "The paper follows one reasoning step. The model's pseudo-generation gives Jodorowsky a wrong birth "
              "date, its sampled continuations disagree, and the uncertainty U of its hidden states is over δ, so "
              "SEAKR searches. It re-ranks the passages by how far each lowers U: the one with his real birth date "
              "lowers it most and is kept, though the search engine ranked it second, and the answer is right.",
              _seakr),
    CaseStory("blendfilter-blendfilter", "BlendFilter", "section 4.8 (figure 6)",
              "The paper blends three queries: the question, the question with the model's answer from the first "
              "passages (external), and the question with what the model writes from memory (internal). The first "
              "two find only the SuperMansion article; the internal one finds Jillian Bell's. The model, as a "
              "filter, drops the irrelevant passages of each set, and the answer from the union is right.",
              _blendfilter),
    CaseStory("drrag-sr", "DR-RAG", "table 5",
              "The paper's table 5 sets DR-RAG beside traditional retrieval: one search with the question, whose "
              "passages include an irrelevant one (Debbie Allen's, in the paper) that the model then answers with.",
              _traditional),
    CaseStory("drrag-drrag", "DR-RAG", "tables 5 and 10",
              "The paper asks for the spouse of the performer of “Green”. The question alone finds Steve Hillage's "
              "album but not his partner, whose article never mentions Green; searching again with the question "
              "joined to the album's passage finds Miquette Giraudy, a small classifier accepts the pair, and the "
              "answer is right where traditional retrieval answered Debbie Allen.", _drrag),
    _beside_dragin_story("ETC", "2511.09980", _etc,
                         "which watches how the model's uncertainty changes word by word: it retrieves where the "
                         "entropy starts to climb sharply (the smoothed second difference, weighted by attention), to "
                         "bring the passages in before the wrong words are written."),
    _beside_dragin_story("TARG", "2511.09803", _targ,
                         "which decides once, before answering: the model writes a short draft without passages, and "
                         "only if that draft is uncertain (its top two choices close, on average) does TARG search."),
    _dragin_story("probing_rag", _probing_rag,
                  "The same question with Probing-RAG, which lets the model write its whole answer without passages, "
                  "then asks a small prober on one layer's hidden states whether that answer is likely wrong; only "
                  "then does it search, and it asks again after each new answer. DRAGIN's run on the same question "
                  "and model is shown beside it.", figure="appendix C (Probing-RAG, arXiv 2410.13339)"),
)}


def _method_title(method: str) -> str:
    try:
        from explorer.methods.base import get_method

        return get_method(method).title
    except Exception:  # a stored run of a method this build does not have
        return method


def caption(key: str, trace: Trace, beside: Trace | None = None) -> Caption | None:
    """The caption of the gallery item ``key`` for its recorded ``trace`` (None: no story for that key)."""
    story = STORIES.get(key)
    if story is None:
        return None
    told = story.tell(trace, beside)
    model = str((trace.model or {}).get("name") or "?")
    title = f"{story.paper} case study · {_method_title(trace.method)} · recorded with {model}"
    return Caption(key=key, title=title, model=model, paper=story.paper, figure=story.figure, story=story.story,
                   facts=told.facts, beats=told.beats, claims=told.claims, look=told.look)
