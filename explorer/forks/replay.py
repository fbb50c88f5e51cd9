"""Replaying a parent run inside its fork: the parent's spans and searches served from its trace.

A fork runs the method again from the start, with a :class:`Replay` on its recorder. While the
fork is before its divergence, every generation whose prompt matches the parent's event of the
same id is served from the parent's trace (tokens and signals as recorded, no model pass), and
every search returns the parent's passages (no retriever call). Event ids stay aligned with the
parent's, so the check, generation or search at which the plan diverges is found by its id. From
there on the fork is live: the engine generates and the retriever searches.

What cannot be served from a trace is computed: hidden states (SEAKR's samples), the attention
rows QFS reads (one batched pass over the replayed span's prompt and tokens, instead of a pass per
token), the reference's second attention pass. The costs say what was replayed and what was run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from explorer.config import Config
from explorer.forks.plan import Divergence, ForkPlan
from explorer.retrieval.base import Hit, Retriever
from explorer.trace import Event, TokenSignal, Trace, TraceRecorder, register_event_kind

register_event_kind("fork", ("parent", "change", "parent_event"),
                    "Where a fork stopped replaying its parent and what it changed: the parent run id, the change "
                    "and the id of the parent's event the fork diverged at (events before it are the parent's).")


@dataclass
class SearchChange:
    """How the diverging search differs: the query sent, the passages given (None: search), extra event fields."""

    query: str
    hits: list[Hit] | None = None
    query_fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    retrieval_fields: dict[str, Any] = dataclasses.field(default_factory=dict)


class Replay:
    """The parent's trace served to a fork until its divergence (see the module docstring)."""

    def __init__(self, parent: Trace, plan: ForkPlan, divergence: Divergence, config: Config, *,
                 notes: list[str] | None = None) -> None:
        self.parent, self.plan, self.divergence, self.config = parent, plan, divergence, config
        self.notes = list(notes or [])
        self.live = False
        #: A forced retrieval's own query, sent by the first search after the forced check.
        self.forced_query: str | None = plan.change.query if plan.change.kind == "force_retrieval" else None

    # -- the turn ---------------------------------------------------------------------------------
    def _parent_event(self, event_id: int) -> Event | None:
        events = self.parent.events
        return events[event_id] if 0 <= event_id < len(events) else None

    def diverge(self, rec: TraceRecorder, parent_event: int, *, reason: str | None = None) -> None:
        """Go live here, and mark the place in the trace."""
        if self.live:
            return
        self.live = True
        fields: dict[str, Any] = {"parent": self.parent.run_id, "change": self.plan.change.to_dict(),
                                  "at": self.plan.point.to_dict(), "parent_event": parent_event}
        if reason:
            fields["unplanned"] = reason
        if self.notes:
            fields["notes"] = self.notes
        rec.add("fork", **fields)
        if self.plan.change.kind == "set_params" and reason is None:
            for name, value in self.plan.change.params.items():
                setattr(self.config, name, value)

    def carry_markers(self, rec: TraceRecorder) -> None:
        """Copy the parent's own fork markers (a fork of a fork) where they stand, so the ids stay aligned."""
        while not self.live:
            event = self._parent_event(len(rec.trace.events))
            if event is None or event.kind != "fork":
                return
            rec.add("fork", **{**event.payload, "inherited": True})
            change = event.payload.get("change") or {}
            if change.get("kind") == "set_params":  # the parent changed parameters here: so does its fork
                for name, value in (change.get("params") or {}).items():
                    setattr(self.config, name, value)

    def _past(self, rec: TraceRecorder, at: int) -> bool:
        """Whether the fork has gone past its divergence point without the planned call (then it goes live)."""
        if at > self.divergence.event:
            self.diverge(rec, at, reason="the run passed the fork point without the planned decision")
            return True
        return False

    # -- hooks ------------------------------------------------------------------------------------
    def _next(self, rec: TraceRecorder) -> int | None:
        """The id of the fork's next event while it still replays; None once live (it goes live here when
        this model call is the planned point)."""
        if self.live:
            return None
        self.carry_markers(rec)
        at = len(rec.trace.events)
        if self._past(rec, at):
            return None
        if self.divergence.hook == "generate" and at == self.divergence.event:
            self.diverge(rec, at)
            return None
        return at

    def generation(self, engine: Any, rec: TraceRecorder, *, prompt: str, prompt_ids: list[int],
                   segments: list[tuple[str, int, int]], purpose: str, max_new_tokens: int, attention: bool,
                   hidden: Any) -> Any:
        """The parent's span for this call, recorded into the fork, or None to generate it live."""
        if self.live:
            self.forced_query = None  # a forced query serves the search right after the forced decision only
            return None
        at = self._next(rec)
        if at is None or hidden is not None:
            return None  # a hidden state is not in the trace: generated again, to the same tokens
        event = self._parent_event(at)
        p = event.payload if event is not None else {}
        if (event is None or event.kind != "generation" or p.get("prompt") != prompt or p.get("purpose") != purpose
                or "batch" in p or p.get("max_new_tokens", max_new_tokens) != max_new_tokens):
            self.diverge(rec, at, reason=f"the fork's generation {at} differs from its parent's (another prompt)")
            return None
        return self._copy_span(engine, rec, p, prompt, prompt_ids, segments, attention)

    def _copy_span(self, engine: Any, rec: TraceRecorder, p: dict[str, Any], prompt: str, prompt_ids: list[int],
                   segments: list[tuple[str, int, int]], attention: bool) -> Any:
        """The parent's generation event ``p`` recorded into the fork and returned as a Generation."""
        from explorer.engine.generation import Generation

        tokens = [TokenSignal.from_dict(t) for t in p.get("tokens") or []]
        gen = Generation(purpose=str(p.get("purpose", "")), prompt=prompt, prompt_ids=list(prompt_ids),
                         segments=list(segments), ids=[int(t.id) for t in tokens], tokens=tokens,
                         text=str(p.get("text", "")), stopped_by=str(p.get("stopped_by", "max_tokens")),
                         _engine=engine if attention else None, _cache=None)
        gen.replayed = True  # type: ignore[attr-defined]
        costs = rec.costs
        costs.llm_calls += 1
        costs.prompt_tokens += len(prompt_ids)
        costs.generated_tokens += len(tokens)
        costs.replayed_spans += 1
        costs.replayed_tokens += len(tokens)
        gen.event_id = rec.add("generation", **{**p, "seconds": 0.0, "replayed": True}).id
        if p.get("attention_window_limited") and engine is not None:
            engine.note_window(rec)  # what the engine adds after such a span, so the ids stay the parent's
        return gen

    def measurement(self, engine: Any, rec: TraceRecorder, *, prompt: Any, purpose: str, primary: str) -> Any:
        """A sampled context's measurement served from the parent (SEAKR's U), or None to sample it live.

        The parent's greedy span and its ``uncertainty`` events are copied; the samples themselves
        are not in a trace, and nothing after the measurement reads them.
        """
        at = self._next(rec)
        if at is None:
            return None
        text, prompt_ids, segments = engine.encode_prompt(prompt)
        event = self._parent_event(at)
        p = event.payload if event is not None else {}
        if event is None or event.kind != "generation" or "batch" not in p or p.get("prompt") != text \
                or p.get("purpose") != purpose:
            self.diverge(rec, at, reason=f"the fork's sampled context {at} differs from its parent's")
            return None
        from explorer.engine.sampling import SampleBatch
        from explorer.engine.uncertainty import Estimate, Measurement

        greedy = self._copy_span(engine, rec, p, text, prompt_ids, segments, attention=False)
        k = int((p.get("batch") or {}).get("k", 0))
        rec.costs.sampled_sequences += k
        estimates, ids = {}, {}
        for later in self.parent.events[at + 1:]:
            if later.kind == "uncertainty" and later.payload.get("span") == at:
                ids[later.payload["estimator"]] = rec.add("uncertainty", **later.payload).id
                details = {key: v for key, v in later.payload.items()
                           if key not in ("estimator", "value", "primary", "context", "span", "k")}
                estimates[later.payload["estimator"]] = Estimate(later.payload["estimator"], later.payload["value"],
                                                                 details)
            elif later.kind == "note" and later.payload.get("level") == "warning" and ids:
                rec.add("note", **later.payload)
            else:
                break
        if primary not in estimates:
            raise ValueError(f"the parent's sampled context {at} has no {primary} estimate")
        batch = SampleBatch(prompt=text, prompt_ids=prompt_ids, segments=segments, k=k,
                            seed=int((p.get("batch") or {}).get("seed", 0)), samples=[], empty=0, greedy=greedy,
                            greedy_energies=[], layer=None, site=None, forward_passes=0, seconds=0.0,
                            event_id=greedy.event_id)
        return Measurement(batch=batch, estimates=estimates, primary=primary, event_ids=ids)

    def search(self, rec: TraceRecorder, retriever: Retriever,
               query: str) -> tuple[list[Hit], int] | SearchChange | None:
        """A replayed search (its hits and retrieval event id), the diverging search's change, or None (live)."""
        self.carry_markers(rec)
        at = len(rec.trace.events)  # the query event's id; its retrieval event comes next
        if self.live:
            if self.forced_query is not None:
                forced, self.forced_query = self.forced_query, None
                return SearchChange(forced, query_fields={"method_query": query, "forced": True})
            return None
        if self._past(rec, at + 1):
            return None
        if self.divergence.hook == "search" and at + 1 == self.divergence.event:
            self.diverge(rec, at + 1)
            return self._changed(retriever, query)
        q_event, r_event = self._parent_event(at), self._parent_event(at + 1)
        if q_event is None or r_event is None or q_event.kind != "query" or r_event.kind != "retrieval":
            self.diverge(rec, at, reason=f"the fork searched where its parent did not (event {at})")
            return None
        rec.add("query", **{**q_event.payload, "replayed": True})
        hits = [Hit.from_dict(h) for h in r_event.payload.get("hits") or []]
        rec.costs.retrievals += 1
        rec.costs.reused_retrievals += 1
        event = rec.add("retrieval", **{**r_event.payload, "query": at, "seconds": 0.0, "replayed": True})
        return hits, event.id

    def _changed(self, retriever: Retriever, query: str) -> SearchChange:
        change = self.plan.change
        if change.kind == "edit_query":
            return SearchChange(str(change.query), query_fields={"edited_from": query})
        if change.kind == "suppress_retrieval":
            return SearchChange(query, hits=[], retrieval_fields={"suppressed": True})
        if change.kind == "edit_passages":
            held = self._parent_event(self.divergence.event)
            parent_hits = [Hit.from_dict(h) for h in (held.payload.get("hits") if held else None) or []]
            return SearchChange(query, hits=self._passages(retriever, parent_hits),
                                retrieval_fields={"edited": {"from": [h.passage.id for h in parent_hits],
                                                             "to": list(change.passages or ())}})
        return SearchChange(query)

    def _passages(self, retriever: Retriever, parent_hits: list[Hit]) -> list[Hit]:
        """The edited passage list: kept ones as the parent had them, added ones read from the corpus."""
        held = {h.passage.id: h for h in parent_hits}
        out = []
        for rank, pid in enumerate(self.plan.change.passages or (), start=1):
            hit = held.get(pid)
            if hit is None:
                hit = Hit(passage=passage_by_id(retriever, pid), score=0.0, rank=rank)
            out.append(dataclasses.replace(hit, rank=rank))
        return out

    def decide(self, rec: TraceRecorder, span: int | None, fired: int | None) -> tuple[int | None, dict[str, Any]]:
        """The unit a check fires at (the method's, or the fork's at its point) and what to add to the check event."""
        d = self.divergence
        self.carry_markers(rec)
        if self.live:
            return fired, {}
        if d.hook != "check" or span != d.event:
            # Before the point the parent's decision stands, its own fork's override included.
            held = self._parent_event(len(rec.trace.events))
            if held is not None and held.kind == "check" and held.payload.get("span") == span:
                override = held.payload.get("fork_override")
                return held.payload.get("fired"), ({"fork_override": override} if override else {})
            return fired, {}
        self.diverge(rec, d.event)
        if not d.override:
            return fired, {}
        return d.fired, {"fork_override": {"method_fired": fired, "fired": d.fired,
                                           "change": self.plan.change.kind}}


def passage_by_id(retriever: Retriever, passage_id: str) -> Any:
    """A corpus passage by id, or a clear error when the retriever cannot give it."""
    from explorer.errors import ConfigError

    getter = getattr(retriever, "passage", None)
    passage = getter(passage_id) if callable(getter) else None
    if passage is None:
        raise ConfigError(f"passage {passage_id!r} is not in the corpus {getattr(retriever, 'name', '')}".strip(),
                          where="passages", fix="add passages by their ids as search results show them")
    return passage
