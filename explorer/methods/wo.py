"""wo-RAG: the few-shot chain-of-thought answer with no retrieval at all, the floor every method is measured against."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.trace import TraceRecorder


@dataclass
class WoConfig(common.BaseConfig):
    """Only the generation settings: nothing is retrieved, so the answer shows what the model
    knows on its own."""


@register
class WoRAG(Method, name="wo", title="wo-RAG (no retrieval)", config=WoConfig):
    def run(self, question: str, rec: TraceRecorder) -> None:
        segments = prompts.build_prompt(question, shots=common.shots(self.config, question))
        gen = common.generate(self.engine, rec, segments, max_new_tokens=self.config.max_length, purpose="answer")
        common.finish(self.engine, rec, self.config, question, gen.text)
