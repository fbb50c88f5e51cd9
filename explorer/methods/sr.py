"""SR-RAG: retrieve once with the question, put the passages in the prompt, generate once."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.trace import TraceRecorder


@dataclass
class SrConfig(common.RetrievalConfig):
    """Single-round retrieval: top_k passages for the question."""


@register
class SrRAG(Method, name="sr", title="SR-RAG (single retrieval)", config=SrConfig):
    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg = self.config
        hits, retrieval = common.search(rec, self.retriever, question, cfg.top_k, source="question")
        segments = prompts.build_prompt(question, shots=common.shots(cfg, question), hits=hits)
        gen = common.generate(self.engine, rec, segments, max_new_tokens=cfg.max_length, purpose="answer")
        common.continuation(rec, gen, retrieval)
        common.finish(self.engine, rec, cfg, question, gen.text, hits)
