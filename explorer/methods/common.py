"""What the methods share: the common config fields, recorded retrieval, and the final answer step.

Each method module then holds only its own decisions. Retrieval always goes through
:func:`search`, so every query and every passage list lands in the trace the same way, and
every run ends in :func:`finish`, which applies the answer convention of methods.md (if the text
never says "So the answer is", append the phrase and let the model complete it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from explorer.config import Config, param
from explorer.engine.generation import Engine, Generation
from explorer.methods import prompts
from explorer.retrieval.base import Hit, Retriever
from explorer.trace import TokenSignal, TraceRecorder


@dataclass
class BaseConfig(Config):
    """Fields every method has. Defaults follow the DRAGIN paper's HotpotQA setting."""

    max_length: int = param(100, lo=8, hi=1024, help="generation length: most answer tokens before stopping "
                                                     "(the papers' generate_max_length: 64, 100 or 128)")
    fewshot: int = param(6, lo=0, hi=8, help="few-shot exemplars in the prompt (the papers use 6 to 8)")
    exemplars: str = param("auto", choices=prompts.EXEMPLAR_CHOICES,
                           help="exemplar set: auto picks yes/no or multi-hop from the question's first word")
    answer_tokens: int = param(24, lo=1, hi=128, help="tokens allowed to complete a missing 'So the answer is'")


@dataclass
class RetrievalConfig(BaseConfig):
    """Fields of methods that retrieve."""

    top_k: int = param(3, lo=1, hi=20, help="passages per retrieval (the papers use 3)")
    max_rounds: int = param(12, lo=1, hi=64, help="safety cap on generate/retrieve rounds per question")


@dataclass
class IterativeConfig(RetrievalConfig):
    """Fields of methods that retrieve again as they write."""

    initial_retrieval: bool = param(True, help="retrieve with the question before anything is written")


def shots(config: BaseConfig, question: str, *, separator: str = "\n\n") -> str:
    return prompts.exemplars(question, config.exemplars, config.fewshot, separator=separator)


def search(rec: TraceRecorder, retriever: Retriever, query: str, k: int, *, source: str,
           **details: Any) -> tuple[list[Hit], int]:
    """Record the query, run the search, record the passages; returns the hits and the retrieval event id.

    ``source`` names where the query came from (question, qfs, masked sentence, window...);
    ``details`` are kept on the query event (QFS candidates and weights, masked tokens...).
    """
    given, extra = None, {}
    if rec.replay is not None:  # a fork: the parent's search served, or this one changed
        served = rec.replay.search(rec, retriever, query)
        if isinstance(served, tuple):
            return served
        if served is not None:
            query, given, details, extra = served.query, served.hits, {**details, **served.query_fields}, \
                served.retrieval_fields
    query_event = rec.add("query", text=query, source=source, **details)
    with rec.phase("retrieval") as timer:
        hits = given if given is not None else retriever.search(query, k) if query.strip() else []
    elapsed = timer.seconds
    rec.costs.retrievals += 1
    event = rec.add("retrieval", query=query_event.id, hits=[h.to_dict() for h in hits], k=k,
                    seconds=round(elapsed, 5), retriever=getattr(retriever, "name", "retriever"), **extra)
    if not hits:
        rec.add("note", message=f"retrieval for {query!r} returned no passages; generation continues without them",
                level="warning")
    return hits, event.id


def continuation(rec: TraceRecorder, gen: Generation, retrieval_event: int | None) -> None:
    """Mark a generated span as the continuation that was given a retrieval's passages."""
    if gen.event_id is not None and retrieval_event is not None:
        rec.add("continuation", span=gen.event_id, retrieval=retrieval_event)


def generate(engine: Engine, rec: TraceRecorder, segments: prompts.Segments, *, max_new_tokens: int, purpose: str,
             attention: bool = False, **kwargs: Any) -> Generation:
    """Generate with the project's stop strings (the model starting a new exemplar ends the span)."""
    limit = max(1, max_new_tokens)
    return engine.generate(segments, max_new_tokens=limit, purpose=purpose, rec=rec, attention=attention,
                           stop_strings=prompts.STOP_STRINGS, **kwargs)


def generate_reference(engine: Engine, rec: TraceRecorder, segments: prompts.Segments, *, max_new_tokens: int,
                       purpose: str) -> Generation:
    """Generate as the DRAGIN authors' code does: no stop strings, so only end-of-sequence or the length
    limit ends the chunk, and the text decoded with special tokens (the end-of-turn token stays in it).

    Without stop strings the model often goes on past its answer into an exemplar of its own
    ("Question: ..."), whose sentences the reference then checks too; a note says so when it happens.
    """
    gen = engine.generate(segments, max_new_tokens=max(1, max_new_tokens), purpose=purpose, rec=rec,
                          attention=False, keep_special=True)
    beyond = [s for s in prompts.STOP_STRINGS if s in gen.text]
    if beyond:
        rec.add("note", level="defect", span=gen.event_id,
                message=f"this {purpose} runs past {beyond[0]!r} into text the model made up (a new exemplar); the "
                        "authors' code generates without stop strings and checks those sentences too")
    return gen


def truncate_query(engine: Engine, query: str, max_tokens: int) -> str:
    """What the authors' retrieve() sends BM25: the query re-encoded, cut to its last ``max_tokens`` tokens, decoded."""
    ids = engine.tokenize(query)
    return engine.decode(ids[-max_tokens:] if len(ids) > max_tokens else ids)


def initial_search(rec: TraceRecorder, retriever: Retriever, question: str,
                   config: IterativeConfig) -> tuple[list[Hit], int | None]:
    """The passages a loop starts from: the question's, when ``initial_retrieval`` is on."""
    if not config.initial_retrieval:
        return [], None
    return search(rec, retriever, question, config.top_k, source="question")


def budgeted_rounds(rec: TraceRecorder, engine: Engine, config: RetrievalConfig,
                    text_so_far: Callable[[], str]) -> Iterator[int]:
    """Yield each round's token budget until the answer reaches ``max_length`` or ``max_rounds`` is spent.

    ``text_so_far`` is read at the start of every round (the loop body grows the text).
    """
    for rnd in range(config.max_rounds):
        rec.step = rnd
        budget = token_budget_left(engine, text_so_far(), config.max_length)
        if budget <= 0:
            return
        yield budget


class FoundQuery(Protocol):
    """A query a method built from a draft: its text and what the query event keeps beside it."""

    query: str

    def details(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Trigger:
    """What a method's check found in a draft: where to cut it and what to search for in its place.

    ``token_index`` is the first token dropped and ``reason`` goes on the truncation event. ``query``
    is called once the cut is recorded; ``source`` and ``trigger_token`` go on the query event.
    """

    token_index: int
    reason: str
    query: Callable[[], FoundQuery]
    source: str
    trigger_token: str


#: A method's check of one draft: ``(rec, gen, start)`` -> a :class:`Trigger`, or None to keep the draft whole.
DraftCheck = Callable[[TraceRecorder, Generation, int], "Trigger | None"]


def draft_and_retrieve(config: RetrievalConfig, engine: Engine, retriever: Retriever, rec: TraceRecorder,
                       question: str, check: DraftCheck, *, attention: bool = False,
                       stop_when_empty: bool = False) -> tuple[str, list[Hit]]:
    """The papers' drafting loop (DRAGIN's, ETC's): draft, let the method check the draft, keep it or cut and search.

    Each round drafts from the question, the last search's passages and the answer so far, within the
    token budget left. ``check`` records the method's decision and returns None (the draft is kept
    whole; the loop ends at the answer phrase or at a draft that stopped before its budget) or a
    :class:`Trigger` (the draft is cut there, what stays is kept and the trigger's query is searched).
    ``start`` is 1 right after a retrieval: the continuation keeps at least its first token (or word),
    or a trigger on it would retrieve again at once, forever. ``stop_when_empty`` ends the loop at a
    draft with no tokens before it is checked (a check that reads a draft's attention needs one).
    Returns the answer text and the passages of the last search.
    """
    shots_text = shots(config, question)
    text, hits, retrieval = "", [], None
    for budget in budgeted_rounds(rec, engine, config, lambda: text):  # noqa: B023 (read each round)
        segments = prompts.build_prompt(question, shots=shots_text, hits=hits, answer_so_far=text)
        gen = generate(engine, rec, segments, max_new_tokens=budget, purpose="draft", attention=attention)
        continuation(rec, gen, retrieval)
        if stop_when_empty and not gen.ids:
            break
        trigger = check(rec, gen, 1 if retrieval is not None else 0)
        if trigger is None:
            text = prompts.join_text(text, gen.text)
            if prompts.has_answer(text) or gen.stopped_by != "max_tokens":
                break
            retrieval = None
            continue
        kept = cut(rec, gen, trigger.token_index, reason=trigger.reason)
        text = prompts.join_text(text, kept) if kept.strip() else text
        found = trigger.query()
        hits, retrieval = search(rec, retriever, found.query, config.top_k, source=trigger.source,
                                 trigger_token=trigger.trigger_token, **found.details())
    return text, hits


def token_budget_left(engine: Engine, text: str, max_length: int) -> int:
    """How many answer tokens remain before ``max_length`` (the papers' stopping rule)."""
    return max_length - engine.count_tokens(text)


def finish(engine: Engine, rec: TraceRecorder, config: BaseConfig, question: str, text: str,
           hits: list[Hit] | None = None) -> None:
    """Complete the answer phrase if missing, then record the final output and extracted answer."""
    text = text.strip()
    completed = False
    if not prompts.has_answer(text):
        lead = prompts.join_text(text, prompts.ANSWER_PHRASE)
        segments = prompts.build_prompt(question, shots=shots(config, question), hits=hits or [],
                                        answer_so_far=lead)
        gen = engine.generate(segments, max_new_tokens=config.answer_tokens, purpose="answer", rec=rec,
                              attention=False, stop_strings=("\n",), meta={"appended": prompts.ANSWER_PHRASE})
        text = lead + gen.text.rstrip()
        completed = True
    answer = prompts.extract_answer(text)
    rec.trace.output = text
    rec.trace.answer = answer
    rec.add("answer", text=text, answer=answer, completed_phrase=completed)


def token_at_char(gen: Generation, char: int) -> int:
    """Index of the first token of ``gen`` whose text begins at or after character ``char``.

    A token's leading whitespace does not count: ``" David"`` begins where ``David`` does, so a
    sentence starting at ``D`` starts with that token (and the cut before it keeps exactly the
    sentences before).
    """
    for i, (start, token) in enumerate(zip(gen.offsets(), gen.tokens, strict=True)):
        text = token.text
        if start + len(text) - len(text.lstrip()) >= char and (text.strip() or start >= char):
            return i
    return len(gen.tokens)


def cut(rec: TraceRecorder, gen: Generation, token_index: int, *, reason: str, **extra: Any) -> str:
    """Keep ``gen``'s tokens before ``token_index``; record the cut and what was discarded. Returns the kept text.

    ``extra`` goes on the truncation event (the reference variants add ``kept_as``: the kept text
    exactly as the authors' code re-joins it).
    """
    offsets = gen.offsets()
    at = offsets[token_index] if token_index < len(offsets) else len(gen.text)
    kept, discarded = gen.text[:at], gen.text[at:]
    if discarded:
        rec.costs.discarded_tokens += len(gen.tokens) - token_index
        rec.add("truncation", span=gen.event_id, token_index=token_index, kept_text=kept, discarded_text=discarded,
                reason=reason, **extra)
    return kept


def cut_before_sentence(rec: TraceRecorder, gen: Generation, decision: Any, *, reason: str) -> str:
    """The reference variants' cut: ``gen`` keeps the sentences before ``decision.sentence_start`` and the
    truncation event records ``decision.kept_text`` (the kept text as the authors' code re-joins it), returned."""
    kept = decision.kept_text
    cut(rec, gen, token_at_char(gen, decision.sentence_start), kept_as=kept, reason=reason)
    return kept


def first_sentence_end(text: str) -> int:
    """Character offset where the first sentence of ``text`` ends (spaCy's sentence splitter)."""
    from explorer.engine.language import get_language

    sentences = get_language().sentences(text)
    if len(sentences) <= 1:
        return len(text)
    return sentences[1].start_char


_SENTENCE_STARTED = re.compile(r"[.!?][\"')\]]*\s+\S|\n\s*\S")


def second_sentence_started(tokens: list[TokenSignal]) -> bool:
    """Cheap stop rule for look-ahead generation: a new sentence (or line) has begun after some text."""
    text = "".join(t.text for t in tokens).lstrip()
    return bool(_SENTENCE_STARTED.search(text))


def keep_first_sentence(rec: TraceRecorder, gen: Generation) -> str:
    """The first sentence of a span; the rest is cut (and recorded as discarded)."""
    end = first_sentence_end(gen.text)
    if end >= len(gen.text):
        return gen.text
    return cut(rec, gen, token_at_char(gen, end), reason="only the first sentence is kept")


def check(rec: TraceRecorder, *, span: int | None, signal: str, threshold: float, compare: str,
          units: list[dict[str, Any]], fired: int | None, rule: str, **extra: Any) -> int | None:
    """Record one retrieval decision with every unit's value, so any other threshold can be replayed.

    ``units`` are tokens, words or sentences, each a dict with at least ``text`` and ``value``
    (and ``eligible`` when some units cannot fire, such as stopwords); ``compare`` is ``>`` or
    ``<``; ``fired`` is the index of the unit that fired, or None.

    Returns the unit the method acts on: ``fired``, unless this run is a fork whose change is at
    this decision (a forced or suppressed retrieval); the check event then records both.
    """
    if rec.replay is not None:
        fired, override = rec.replay.decide(rec, span, fired)
        extra = {**extra, **override}
    rec.add("check", span=span, signal=signal, threshold=threshold, compare=compare, units=units, fired=fired,
            rule=rule, **extra)
    return fired
