"""The model as a passage judge: one few-shot prompt layout and one short, attention-free call.

BlendFilter's knowledge filter ("which of these passages help answer the question?", answered
with numbers) and DR-RAG's LLM judge ("do these two passages answer it together?", answered yes
or no) put the same kind of question to the model: an instruction, worked examples, the case, a
lead the answer follows, and a few tokens of greedy answer that need no attention signals. That
much is shared here; each method reads its answer its own way
(:func:`explorer.methods.blendfilter.filter_parse.parse_filter_answer`,
:func:`explorer.methods.drrag.method.yes_probability`), since a list of numbers and a yes/no
probability are different verdicts. SEAKR's rerank is not a judge: it measures the model's
uncertainty with each passage in the prompt (:mod:`explorer.engine.uncertainty`), so it does not
use this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from explorer.engine.generation import Generation
from explorer.trace import TraceRecorder


def clip_words(text: str, words: int) -> str:
    """The first ``words`` words of ``text``, with " ..." where something was cut (judges read short passages)."""
    parts = text.split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def few_shot(instruction: str, shots: Iterable[str], case: str, lead: str) -> str:
    """Instruction, the worked examples (each ending in its verdict), the case, and the lead the answer follows."""
    return instruction + "".join(shots) + case + lead


def ask(engine: Any, prompt: str, *, purpose: str, rec: TraceRecorder | None, max_new_tokens: int,
        stop_strings: Sequence[str] = (), meta: dict[str, Any] | None = None) -> Generation:
    """The judge's answer: a short greedy span, recorded under ``purpose``, without the attention probe."""
    return engine.generate(prompt, max_new_tokens=max_new_tokens, purpose=purpose, rec=rec, attention=False,
                           stop_strings=stop_strings, meta=meta)
