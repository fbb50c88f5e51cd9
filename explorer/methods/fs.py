"""FS-RAG (IRCoT-style): after each generated sentence, retrieve with that sentence and go on.

Generation stops as soon as a second sentence begins, so little is generated only to be thrown
away; the first sentence is kept and becomes the next query. The first passages come from the
question, as in IRCoT.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.config import param
from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.trace import TraceRecorder


@dataclass
class FsConfig(common.IterativeConfig):
    """Retrieval before every sentence: one sentence is generated per round, with the passages the
    previous sentence found."""

    sentence_tokens: int = param(64, lo=4, hi=512, help="most tokens one sentence may take")


@register
class FsRAG(Method, name="fs", title="FS-RAG (every sentence)", config=FsConfig):
    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg, engine = self.config, self.engine
        hits, retrieval = common.initial_search(rec, self.retriever, question, cfg)
        shots = common.shots(cfg, question)
        text = ""
        for budget in common.budgeted_rounds(rec, engine, cfg, lambda: text):  # noqa: B023 (read each round)
            segments = prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=text)
            gen = common.generate(engine, rec, segments, max_new_tokens=min(cfg.sentence_tokens, budget),
                                  purpose="sentence", until=common.second_sentence_started)
            common.continuation(rec, gen, retrieval)
            sentence = common.keep_first_sentence(rec, gen).strip()
            if not sentence:
                break
            text = prompts.join_text(text, sentence)
            if prompts.has_answer(text) or gen.stopped_by in ("eos", "stop_string") and sentence == gen.text.strip():
                break
            hits, retrieval = common.search(rec, self.retriever, sentence, cfg.top_k, source="sentence")
        common.finish(engine, rec, cfg, question, text, hits)
