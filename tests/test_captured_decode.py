"""The decode step as one captured graph gives the tokens and signals of the engine's own loop.

On a GPU the step is replayed as a CUDA graph; on a CPU the same step is captured by
``torch.compile(fullgraph=True)``, which refuses any step that cannot be traced as ONE graph, so
this is where the step's capturability (no host synchronisation, no Python between the forward
pass and the signals) is checked without a GPU. The compile backend here is ``aot_eager``: it
captures and runs the same traced graph without generating C++ (inductor's code generation takes
minutes on a small CPU; the GPU path needs none, it replays the captured kernels).
"""

from __future__ import annotations

import pytest
import torch

from explorer.engine import batching
from explorer.engine.generation import Engine
from explorer.engine.hidden import HiddenSpec
from explorer.trace import Trace, TraceRecorder
from tests.test_batched_decoding import close

PROMPT = "Question: who built the arena in Lewiston?\nAnswer:"


def compile_unavailable() -> str | None:
    try:
        import torch._dynamo as dynamo

        if not dynamo.is_dynamo_supported():
            return "torch.compile does not support this Python/platform"
    except ImportError as exc:
        return f"torch.compile is not available ({exc})"
    return None


def recorder() -> TraceRecorder:
    return TraceRecorder(Trace(question="q", method="wo", variant="paper", config={}, model={}))


def hook_count(model: torch.nn.Module) -> int:
    return sum(len(module._forward_hooks) for module in model.modules())


@pytest.mark.skipif(compile_unavailable() is not None, reason=str(compile_unavailable()))
def test_the_compiled_step_gives_the_loops_tokens_signals_attention_and_hidden_state(tiny_lm, monkeypatch) -> None:
    monkeypatch.setenv("EXPLORER_COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()  # the recompile limit counts per process: other tests' graphs must not use it up
    engine = Engine(tiny_lm)
    alone = engine.generate(PROMPT, max_new_tokens=12, attention=True, hidden=HiddenSpec(), ignore_eos=True)
    hooks = hook_count(tiny_lm.model)
    batcher = batching.enable(engine, mode="compile")
    try:
        rec = recorder()
        captured = engine.generate(PROMPT, max_new_tokens=12, attention=True, hidden=HiddenSpec(), ignore_eos=True,
                                   rec=rec)
        assert batcher.step.fallback is None and batcher.step.mode == "compile"  # traced as one graph
        assert batcher.step._compiled is not None
        assert hook_count(tiny_lm.model) > hooks  # the hidden-state capture's hook
    finally:
        batching.disable(engine)
    assert hook_count(tiny_lm.model) == hooks, "a batcher turned off leaves no hook on the shared model"
    assert captured.ids == alone.ids
    assert close([t.signals for t in captured.tokens], [t.signals for t in alone.tokens])
    assert [t.top for t in captured.tokens][3][0][0] == [t.top for t in alone.tokens][3][0][0]
    assert all(t.signals["amax"] is not None for t in captured.tokens[:-1])  # folded inside the graph
    assert torch.allclose(captured.hidden, alone.hidden, atol=1e-5)
    assert close(captured.attention_row(4), alone.attention_row(4))
    assert not [e for e in rec.trace.events if e.kind == "note"]


def test_a_step_that_cannot_be_captured_runs_eagerly_and_the_trace_says_why(tiny_lm, monkeypatch) -> None:
    monkeypatch.setenv("EXPLORER_COMPILE_BACKEND", "no-such-backend")
    engine = Engine(tiny_lm)
    alone = engine.generate(PROMPT, max_new_tokens=8, attention=True)
    batcher = batching.enable(engine, mode="compile")
    try:
        rec = recorder()
        gen = engine.generate(PROMPT, max_new_tokens=8, attention=True, rec=rec)
    finally:
        batching.disable(engine)
    assert gen.ids == alone.ids
    assert batcher.step.mode == "eager" and "no-such-backend" in (batcher.step.fallback or "")
    notes = [e.payload for e in rec.trace.events if e.kind == "note"]
    assert len(notes) == 1 and notes[0]["decode_fallback"] and "compiled graph" in notes[0]["message"]


@pytest.mark.skipif(compile_unavailable() is not None, reason=str(compile_unavailable()))
def test_the_app_counts_compiled_steps_without_breaking_their_graph(monkeypatch) -> None:
    """The app's pass counter hooks the model; a compiled step must neither trace it (a count that changes
    every step would recompile every step) nor be left out of the count."""
    from explorer.engine.loader import tiny_random_model
    from explorer.runtime import Runtime
    from explorer.ui.runs.controller import RuntimeHolder

    monkeypatch.setenv("EXPLORER_COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    engine = Engine(tiny_random_model(seed=0))
    holder = RuntimeHolder(lambda: Runtime(engine=engine, retriever=None), "tiny")  # type: ignore[arg-type]
    holder.get()
    before = holder.forward_passes
    alone = engine.generate(PROMPT, max_new_tokens=6, ignore_eos=True)
    assert holder.forward_passes - before == alone.forward_passes > 0  # type: ignore[attr-defined]
    batcher = batching.enable(engine, mode="compile")
    try:
        before = holder.forward_passes
        batched = engine.generate(PROMPT, max_new_tokens=12, attention=True, hidden=HiddenSpec(), ignore_eos=True)
        assert batcher.step.fallback is None, batcher.step.fallback
        assert batcher.step.graph_steps >= 10
        # every pass of the generation is counted (the batch's own checks of a new row run from Python besides)
        assert holder.forward_passes - before >= batched.forward_passes  # type: ignore[attr-defined]
    finally:
        batching.disable(engine)
