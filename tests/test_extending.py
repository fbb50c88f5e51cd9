"""Adding a signal and a method touches only their own code: here both live in this file.

A toy per-token signal (the margin between the two most probable next tokens) is registered,
a toy method asks the engine for it, retrieves once where the margin is smallest and records an
event kind of its own; the run validates, stores the signal per token, and the strip offers it
as a colour. Everything is removed from the registries afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from explorer.engine.generation import Engine
from explorer.engine.token_signals import SignalSpec, get_signal, plan, register_signal, unregister_signal
from explorer.errors import ConfigError
from explorer.methods import common, prompts
from explorer.methods.base import METHODS, Method, method_names, register, run_question
from explorer.runtime import Runtime
from explorer.trace import EVENT_SCHEMA, TraceRecorder, register_event_kind
from explorer.ui.views.render import render_runs
from explorer.ui.views.view import TraceView, strip_signals

QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"


def _margin(ctx) -> float:
    top = ctx.stats.top_probs
    return float(top[0] - top[1]) if len(top) > 1 else float(top[0])


@dataclass
class ToyConfig(common.BaseConfig):
    """Only the generation settings."""


class ToyMargin(Method):
    name = "toy_margin"
    title = "toy: retrieve once where the top-2 margin is smallest"
    Config = ToyConfig

    def run(self, question: str, rec: TraceRecorder) -> None:
        segments = prompts.build_prompt(question, shots="")
        gen = common.generate(self.engine, rec, segments, max_new_tokens=self.config.max_length, purpose="draft",
                              signals=("toy_margin",))
        margins = [t.signals["toy_margin"] for t in gen.tokens]
        weakest = min(range(len(margins)), key=margins.__getitem__)
        rec.add("toy_mark", span=gen.event_id, token_index=weakest, margin=margins[weakest])
        hits, _ = common.search(rec, self.retriever, question, 2, source="question")
        answer = common.generate(self.engine, rec, prompts.build_prompt(question, shots="", hits=hits),
                                 max_new_tokens=self.config.max_length, purpose="answer")
        common.finish(self.engine, rec, self.config, question, answer.text, hits)


@pytest.fixture()
def toy_extensions():
    register_signal(SignalSpec("toy_margin", "top-2 margin", "p(best) − p(second best) of the next-token "
                               "distribution", "darker = larger margin", "logits", "min", _margin))
    register_event_kind("toy_mark", ("span", "token_index", "margin"), "where the toy method saw the smallest margin")
    register(ToyMargin)
    yield
    METHODS.pop("toy_margin", None)
    EVENT_SCHEMA.pop("toy_mark", None)
    unregister_signal("toy_margin")


def test_a_toy_signal_and_method_run_end_to_end(toy_extensions, tiny_lm, demo_retriever) -> None:
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    assert "toy_margin" in method_names()
    trace = run_question("toy_margin", QUESTION, runtime, config={"max_length": 12, "fewshot": 0})
    assert trace.status == "complete", trace.error
    trace.validate()
    spans = trace.of_kind("generation")
    draft, answer = spans[0], next(e for e in spans if e.payload["purpose"] == "answer")
    margins = [t["signals"]["toy_margin"] for t in draft.payload["tokens"]]
    assert len(margins) == len(draft.payload["tokens"]) and all(0.0 <= m <= 1.0 for m in margins)
    # Asked for by the draft only: the answer span carries the defaults and not the toy signal.
    assert all("toy_margin" not in t["signals"] for t in answer.payload["tokens"])
    assert all("prob" in t["signals"] for t in answer.payload["tokens"])
    mark = trace.of_kind("toy_mark")[0].payload
    assert mark["margin"] == pytest.approx(min(margins))
    # The UI offers the registered signal as a strip colour, labelled from the registry.
    assert strip_signals()["toy_margin"] == ("top-2 margin", "darker = larger margin")
    assert "toy_margin" in TraceView(trace).available_signals()
    assert "top-2 margin" in render_runs([trace], signal="toy_margin")


def test_a_signal_id_and_a_method_name_are_taken_once(toy_extensions) -> None:
    assert get_signal("toy_margin").aggregate == "min"
    with pytest.raises(ValueError, match="already registered"):
        register_signal(SignalSpec("toy_margin", "other", "x", "y", "logits", "max", _margin))
    with pytest.raises(ConfigError, match="unknown signal 'nope'"):
        plan(["nope"], attention=False)
    with pytest.raises(ValueError, match="requires 'nothing'"):
        register_signal(SignalSpec("toy_derived", "d", "x", "y", "signals", "max", _margin, requires=("nothing",)))

    class Clash(ToyMargin):
        pass

    with pytest.raises(ConfigError, match="already registered"):
        register(Clash)


def test_words_aggregate_a_signal_by_its_registered_rule() -> None:
    from explorer.engine.signals import merge_words

    words = merge_words(["The", " Lew", "iston", " arena"])
    assert get_signal("rind").word_values([0.1, 0.2, 0.5, None], words) == [0.1, 0.5, None]
    assert get_signal("entropy").word_values([1.0, 2.0, 4.0, 3.0], words) == [1.0, 3.0, 3.0]
    assert get_signal("content").word_values([False, True, False, True], words) == [False, True, True]
