"""BlendFilter: blend three queries, let the model filter each passage set, answer from the union.

1. Query blending. The original question q; an *external* augmentation (retrieve K passages with
   q, let the model answer with chain of thought from them, and search with that answer + q); an
   *internal* augmentation (the model writes what it knows about q without passages, and that
   text + q is the query). Each query retrieves K passages (K = 5 in the paper).
2. Knowledge filtering. For each of the three sets separately the model is asked which numbered
   passages help answer q; its verdict is read by :mod:`explorer.methods.blendfilter.filter_parse`. An answer
   that cannot be read keeps nothing of that set (and the trace says so).
3. The union of the filtered sets (filter first, then union, as the paper argues) is the context
   of the final chain-of-thought answer.

The retrieval with q serves twice, as the context of the external augmentation and as the
original query's set, because both are the same search (R(q, K) in the paper's equations).

Trace: ``query`` events carry ``set`` (original / external / internal) and ``parts`` (each part's
text, where it came from, and the ``generation`` event it was written in); ``retrieval`` events
carry ``set``; one ``filter`` event per set; the union is a ``selection`` event with the sets
each passage came through and the unfiltered union (``before_filter``) beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.config import param
from explorer.errors import ConfigError
from explorer.methods import common, judge, prompts
from explorer.methods.base import Method, register
from explorer.methods.blendfilter.filter_parse import parse_filter_answer
from explorer.retrieval.base import Hit
from explorer.trace import TraceRecorder, register_event_kind

register_event_kind(
    "filter", ("passage_ids", "kept", "dropped", "raw_answer", "status"),
    "a model-as-filter verdict over a passage set: the set's passage_ids in prompt order, the kept and dropped "
    "ids, the model's raw_answer and how it was read: status (parsed, none, all, out_of_range, unparseable, "
    "skipped), numbers (1-based, in range), ignored (named but out of range), how; also set, retrieval, generation")

SETS = ("original", "external", "internal")

# The project's own exemplars for the two prompts BlendFilter adds (none of them is about a fact
# in the demo corpus, so they never leak an answer).
INTERNAL_INSTRUCTION = "Write a short encyclopedia paragraph that gives the facts needed to answer the question.\n\n"
INTERNAL_EXAMPLE = (
    "Question: Which river flows through the capital of Hungary?\n"
    "Paragraph: Budapest is the capital and largest city of Hungary. The Danube flows through the middle of the "
    "city, separating hilly Buda on its west bank from flat Pest on its east bank.\n\n"
)

FILTER_INSTRUCTION = ("Read the numbered passages and decide which of them help to answer the question. "
                      "Reply with the numbers of the helpful passages, or with none.\n\n")
# Order matters to a small model, which tends to continue the pattern of the exemplars' verdicts;
# this order (measured on the demo questions) leaves it the least to copy.
FILTER_EXAMPLES = (
    ("Who founded the company that makes the Model T?",
     ("Volkswagen Beetle: The Beetle is a small car built by Volkswagen from 1938 to 2003.",
      "Ford Model T: The Model T was an automobile produced by the Ford Motor Company from 1908 to 1927.",
      "Detroit: Detroit is the largest city of Michigan and the historic centre of the American car industry.",
      "Ford Motor Company: The Ford Motor Company was founded by Henry Ford in 1903."),
     "2, 4"),
    ("What is the national animal of Scotland?",
     ("Edinburgh Castle: Edinburgh Castle stands on Castle Rock above the capital of Scotland.",
      "Loch Ness: Loch Ness is a deep freshwater loch in the Scottish Highlands."),
     "none"),
    ("In which country is the deepest lake in the world?",
     ("Lake Baikal: Lake Baikal is a rift lake in southern Siberia and the deepest lake in the world.",
      "Lake Geneva: Lake Geneva lies on the north side of the Alps, shared by Switzerland and France.",
      "Siberia: Siberia is the vast northern region of Russia, from the Ural Mountains to the Pacific."),
     "1, 3"),
)
FILTER_LEAD = "Helpful passages:"


@dataclass
class BlendFilterConfig(common.BaseConfig):
    """BlendFilter's knobs; defaults follow the paper (K = 5, all three queries, filtering on)."""

    top_k: int = param(5, lo=1, hi=20, help="K: passages retrieved for each of the three queries (paper: 5)")
    internal_tokens: int = param(80, lo=8, hi=512,
                                 help="length of the model's own paragraph about the question (internal augmentation)")
    filter_tokens: int = param(24, lo=2, hi=128, help="tokens allowed for each filter verdict")
    original_query: bool = param(True, help="search with the question itself")
    external_query: bool = param(True, help="search with the model's answer from passages found for the question + q")
    internal_query: bool = param(True, help="search with the model's own paragraph about the question + q")
    filter: bool = param(True, help="let the model filter each passage set (off: answer from the plain union, "
                                    "the paper's unfiltered baseline)")

    def check(self) -> None:
        if not (self.original_query or self.external_query or self.internal_query):
            raise ConfigError("every query is switched off", where="BlendFilterConfig",
                              fix="keep at least one of original_query, external_query, internal_query on")


def filter_prompt(question: str, hits: list[Hit]) -> str:
    """Few-shot prompt asking for the numbers of the passages that help answer ``question``."""
    blocks = []
    for q, passages, verdict in FILTER_EXAMPLES:
        listed = "".join(f"[{i}] {p}\n" for i, p in enumerate(passages, start=1))
        blocks.append(f"Passages:\n{listed}Question: {q}\n{FILTER_LEAD} {verdict}\n\n")
    listed = "".join(f"[{i}] {prompts.passage_text(h.passage)}\n" for i, h in enumerate(hits, start=1))
    return judge.few_shot(FILTER_INSTRUCTION, blocks, f"Passages:\n{listed}Question: {question.strip()}\n", FILTER_LEAD)


def internal_prompt(question: str) -> str:
    """Prompt for the model's own paragraph about the question (no passages)."""
    return INTERNAL_INSTRUCTION + INTERNAL_EXAMPLE + f"Question: {question.strip()}\nParagraph:"


def blend(text: str, question: str) -> str:
    """The augmented query: generated text followed by the question (the paper's a || q)."""
    return prompts.join_text(text, question)


@register
class BlendFilter(Method, name="blendfilter", config=BlendFilterConfig,
                  title="BlendFilter (query blending + knowledge filtering)"):
    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg = self.config
        sets: dict[str, tuple[list[Hit], int]] = {}

        # -- query blending ---------------------------------------------------------------------
        rec.step = 0
        first: tuple[list[Hit], int] | None = None
        if cfg.original_query or cfg.external_query:
            parts = [{"source": "original", "text": question}]
            first = common.search(rec, self.retriever, question, cfg.top_k, source="question",
                                  set="original" if cfg.original_query else "external-context", parts=parts)
            self._tag_retrieval(rec, first[1], "original" if cfg.original_query else "external-context")
            if cfg.original_query:
                sets["original"] = first
        if cfg.external_query:
            assert first is not None
            hits, retrieval = first
            segments = prompts.build_prompt(question, shots=common.shots(cfg, question), hits=hits)
            gen = common.generate(self.engine, rec, segments, max_new_tokens=cfg.max_length, purpose="augment",
                                  meta={"augmentation": "external", "retrieval_event": retrieval})
            common.continuation(rec, gen, retrieval)
            sets["external"] = self._augmented_search(rec, question, gen.text, gen.event_id, "external")
        if cfg.internal_query:
            gen = self.engine.generate(internal_prompt(question), max_new_tokens=cfg.internal_tokens, purpose="augment",
                                       rec=rec, attention=False, stop_strings=prompts.STOP_STRINGS,
                                       meta={"augmentation": "internal"})
            sets["internal"] = self._augmented_search(rec, question, gen.text, gen.event_id, "internal")

        # -- knowledge filtering ----------------------------------------------------------------
        rec.step = 1
        kept: dict[str, list[Hit]] = {}
        for name in SETS:
            if name in sets:
                hits, retrieval = sets[name]
                kept[name] = self._filter(rec, question, name, hits, retrieval) if cfg.filter else list(hits)

        # -- union and answer -------------------------------------------------------------------
        rec.step = 2
        union, selection = self._union(rec, sets, kept)
        segments = prompts.build_prompt(question, shots=common.shots(cfg, question), hits=union)
        gen = common.generate(self.engine, rec, segments, max_new_tokens=cfg.max_length, purpose="answer",
                              meta={"selection": selection, "passages": [h.passage.id for h in union]})
        common.finish(self.engine, rec, cfg, question, gen.text, union)

    # -- steps ------------------------------------------------------------------------------------
    @staticmethod
    def _tag_retrieval(rec: TraceRecorder, retrieval: int, name: str) -> None:
        """Mark which passage set a retrieval produced (common.search knows nothing of sets)."""
        rec.amend(retrieval, set=name)

    def _augmented_search(self, rec: TraceRecorder, question: str, text: str, generation: int | None,
                          name: str) -> tuple[list[Hit], int]:
        text = text.strip()
        if not text:
            rec.add("note", level="warning",
                    message=f"the {name} augmentation came back empty; its query is the question alone")
        parts = [{"source": name, "text": text, "generation": generation}, {"source": "original", "text": question}]
        hits, retrieval = common.search(rec, self.retriever, blend(text, question), self.config.top_k,
                                        source=f"blend-{name}", set=name, parts=parts)
        self._tag_retrieval(rec, retrieval, name)
        return hits, retrieval

    def _filter(self, rec: TraceRecorder, question: str, name: str, hits: list[Hit], retrieval: int) -> list[Hit]:
        ids = [h.passage.id for h in hits]
        if not hits:
            rec.add("filter", set=name, retrieval=retrieval, passage_ids=[], kept=[], dropped=[], raw_answer="",
                    numbers=[], ignored=[], status="skipped", how="no passages were retrieved for this query",
                    generation=None)
            return []
        gen = judge.ask(self.engine, filter_prompt(question, hits), max_new_tokens=self.config.filter_tokens,
                        purpose="filter", rec=rec, stop_strings=("\n",),
                        meta={"set": name, "retrieval_event": retrieval})
        verdict = parse_filter_answer(gen.text, len(hits))
        chosen = [hits[n - 1] for n in verdict.numbers]
        kept_ids = {h.passage.id for h in chosen}
        rec.add("filter", set=name, retrieval=retrieval, passage_ids=ids,
                kept=[h.passage.id for h in chosen], dropped=[i for i in ids if i not in kept_ids],
                raw_answer=gen.text, generation=gen.event_id, **verdict.to_dict())
        if not verdict.readable:
            rec.add("note", level="warning",
                    message=f"the filter verdict for the {name} set could not be read ({verdict.how}): "
                            f"{gen.text.strip()!r}; nothing from that set is kept")
        return chosen

    def _union(self, rec: TraceRecorder, sets: dict[str, tuple[list[Hit], int]],
               kept: dict[str, list[Hit]]) -> tuple[list[Hit], int]:
        """Filtered sets merged in set order, then rank; each passage once, with the sets that kept it."""
        union: dict[str, Hit] = {}
        sources: dict[str, list[str]] = {}
        for name, hits in kept.items():
            for h in hits:
                union.setdefault(h.passage.id, h)
                sources.setdefault(h.passage.id, []).append(name)
        before = list(dict.fromkeys(h.passage.id for name in SETS if name in sets for h in sets[name][0]))
        if self.config.filter:
            reason = "union of the filtered sets (" + ", ".join(kept) + ")"
        else:
            reason = "union of the retrieved sets, unfiltered (" + ", ".join(kept) + ")"
        passages: list[dict[str, Any]] = [
            {"id": pid, "sets": sources[pid], "reason": "kept by the filter of the " + " and ".join(sources[pid])
             + (" set" if len(sources[pid]) == 1 else " sets")} for pid in union]
        event = rec.add("selection", passage_ids=list(union), reason=reason, stage="union", passages=passages,
                        before_filter=before, sets={name: [h.passage.id for h in hits] for name, hits in kept.items()},
                        filtered=self.config.filter)
        if not union:
            rec.add("note", level="warning", message="the filters kept no passage; the answer is written without any")
        return list(union.values()), event.id
