"""FL-RAG: retrieve every n generated tokens, with the last window of generated text as the query.

The new passages replace the old ones. The query is the latest window, never the question (an
early reference version retrieved with the question every time; that is the bug methods.md
warns about). Before anything is generated, the first passages come from the question.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.config import param
from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.trace import TraceRecorder


@dataclass
class FlConfig(common.IterativeConfig):
    """Retrieval every ``window`` tokens, whatever the text says."""

    window: int = param(32, lo=4, hi=512, help="tokens generated between retrievals (the reference's fix_length)")


@register
class FlRAG(Method, name="fl", title="FL-RAG (fixed-length windows)", config=FlConfig):
    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question)
        hits, retrieval = common.initial_search(rec, self.retriever, question, cfg)
        text = ""
        for budget in common.budgeted_rounds(rec, engine, cfg, lambda: text):  # noqa: B023 (read each round)
            segments = prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=text)
            gen = common.generate(engine, rec, segments, max_new_tokens=min(cfg.window, budget), purpose="window")
            common.continuation(rec, gen, retrieval)
            text = prompts.join_text(text, gen.text)
            if prompts.has_answer(text) or gen.stopped_by != "max_tokens" or not gen.text.strip():
                break
            hits, retrieval = common.search(rec, self.retriever, gen.text.strip(), cfg.top_k, source="window",
                                            window_tokens=len(gen.tokens))
        common.finish(engine, rec, cfg, question, text, hits)
