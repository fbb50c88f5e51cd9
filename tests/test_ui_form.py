"""The Run form, browser-free: every registered method and variant runs from its untouched inputs, every
declared parameter type round-trips through its input, and one method's error is its own card."""

from __future__ import annotations

import gradio as gr
import pytest

from explorer.engine.generation import Engine
from explorer.errors import ConfigError
from explorer.methods.base import get_method, method_names, run_question
from explorer.runtime import Runtime
from explorer.store import RunStore
from explorer.ui.page import controls, form
from explorer.ui.runs.controller import RunController, RuntimeHolder

QUESTION = "Who lived longer, Alejandro Jodorowsky or Philip Saville?"
EMBEDDED = controls.model_name("embedded")


@pytest.fixture(scope="module")
def runtime(tiny_lm, demo_retriever) -> Runtime:
    return Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})


def untouched(method: str, variant: str, model: str) -> dict[tuple[str, str], object]:
    """What the Run handler receives from a method's inputs nobody touched (built as the page builds them)."""
    with gr.Blocks():
        return {(method, p.name): form.handed_back(form.param_component(p, controls.shown_default(p, variant, model),
                                                                        p.info))
                for p in controls.params(method)}


def test_every_method_and_variant_runs_from_its_untouched_form_on_the_tiny_model(runtime) -> None:
    model = runtime.engine.fingerprint()["name"]
    ran = []
    for method in method_names():
        for variant in get_method(method).variants:
            # With the embedded model's presets too: the inputs start at them and hand them back unchanged.
            assert controls.spec_for(method, variant, untouched(method, variant, EMBEDDED), model=EMBEDDED).config \
                == {}, (method, variant)
            spec = controls.spec_for(method, variant, untouched(method, variant, model), model=model)
            assert spec.config == {}, (method, variant, spec.config)
            trace = run_question(method, QUESTION, runtime, variant=variant, config=spec.config)
            assert trace.status == "complete", (method, variant, trace.error)
            assert trace.config_sources and "user" not in trace.config_sources.values()
            ran.append((method, variant))
    assert ("seakr", "paper") in ran and ("drrag", "paper") in ran and len(ran) >= 12


def test_each_declared_type_has_an_input_that_gives_back_what_it_was_given() -> None:
    seakr = {p.name: p for p in controls.params("seakr")}
    drrag = {p.name: p for p in controls.params("drrag")}
    with gr.Blocks():
        layer = form.param_component(seakr["layer"], None, "")
        threshold = form.param_component(drrag["threshold"], None, "")
        # an empty text box, neither the text "None" nor a number box (the browser shows and sends 0 for None)
        assert isinstance(layer, gr.Textbox) and layer.value == ""
        assert controls.value_from_control(seakr["layer"], form.handed_back(layer)) is None
        assert controls.value_from_control(drrag["threshold"], form.handed_back(threshold)) is None
        assert isinstance(form.param_component(seakr["k"], 20, ""), gr.Number)
        assert isinstance(form.param_component(seakr["estimator"], "gram", ""), gr.Dropdown)
        assert isinstance(form.param_component(seakr["self_check"], False, ""), gr.Checkbox)
    # a typed value, an emptied box and the text users write for "nothing" all land on the config's terms
    assert controls.value_from_control(seakr["layer"], " 12 ") == 12
    assert controls.value_from_control(seakr["layer"], "  ") is None
    assert controls.value_from_control(seakr["layer"], "None") is None
    assert controls.value_from_control(drrag["threshold"], "0.5") == 0.5
    with pytest.raises(ConfigError, match=r"SeakrConfig\.layer: 'twelve' is not a valid int"):
        controls.spec_for("seakr", None, {("seakr", "layer"): "twelve"})
    with pytest.raises(ConfigError, match=r"seakr · k: no value given"):
        controls.value_from_control(seakr["k"], None)
    # list parameters (none of the shipped methods declares one yet): comma-separated text, items typed
    numbers = controls.Param("toy", "layers", "list[int]", [2, 4], None, None, None, "")
    names = controls.Param("toy", "names", "list[str] | None", None, None, None, None, "")
    shown = controls.control_for(numbers, [2, 4])
    assert (shown.kind, shown.value) == (controls.LIST, "2, 4")
    assert controls.value_from_control(numbers, shown.value) == [2, 4]
    assert controls.value_from_control(numbers, "1,\n 3 ,") == [1, 3]
    assert controls.value_from_control(names, controls.control_for(names, None).value) is None
    assert controls.value_from_control(names, "a, b") == ["a", "b"]


def test_one_methods_error_is_its_own_card_and_the_others_run(tiny_lm, demo_retriever, tmp_db) -> None:
    runtime = Runtime(engine=Engine(tiny_lm), retriever=demo_retriever, corpus={"name": "demo"})
    controller = RunController(RunStore(tmp_db), RuntimeHolder(lambda: runtime, describe="tiny"))
    values = {("wo", "max_length"): 8, ("wo", "fewshot"): 0, ("dragin", "threshold"): -1.0,
              ("sr", "max_length"): 8, ("sr", "fewshot"): 0}
    specs, refused = controls.plan_runs(["dragin", "wo"], {}, values, model="tiny")
    assert [s.method for s in specs] == ["wo"]
    assert [r.method for r in refused] == ["dragin"] and "threshold" in refused[0].message
    # a method that fails while running (a value the form would have refused, sent as is) is its card too
    broken = controls.RunSpec("flare", "paper", {"threshold": 7.0})
    sr = controls.spec_for("sr", None, values, model="tiny")
    updates = list(controller.stream(QUESTION, [specs[0], broken, sr], gold=None, session="s", refused=refused))
    final = updates[-1]
    assert final.done and len(final.run_ids) == 2
    assert [controller.store.get(i).method for i in final.run_ids] == ["wo", "sr"]
    assert final.html.count('class="dre-run dre-refused"') == 2
    assert 'data-method="dragin"' in final.html and 'data-method="flare"' in final.html
    assert "FlareConfig.threshold" in final.html and "dre-error" in final.status
    assert "2 run(s) stored" in final.status and "dragin not run" in final.status


def test_a_gates_preset_moves_the_threshold_and_a_value_typed_after_it_is_the_users() -> None:
    """TARG's τ is measured per gate: after the gate changes the form starts the threshold at that gate's value,
    a run from the untouched threshold takes that gate's preset, and a typed value (even the other gate's
    preset) is the user's."""
    threshold = next(p for p in controls.params("targ") if p.name == "threshold")
    resolved = {gate: controls.shown_default(threshold, "paper", EMBEDDED, {"gate": gate})
                for gate in ("margin", "variance")}
    assert resolved["margin"] != resolved["variance"], "the embedded model's TARG gates share one preset"
    assert str(resolved["variance"]) in controls.preset_note(threshold, "paper", EMBEDDED, {"gate": "variance"})

    def spec(gate: str, typed: float):
        values = untouched("targ", "paper", EMBEDDED)
        values[("targ", "gate")] = gate
        values[("targ", "threshold")] = typed
        return controls.spec_for("targ", "paper", values, model=EMBEDDED).config

    # Untouched after the gate moved it: that gate's preset comes from the run, not from the user.
    assert spec("variance", resolved["variance"]) == {"gate": "variance"}
    # The margin gate's preset typed under the variance gate is the user's value (it was lost before).
    assert spec("variance", resolved["margin"]) == {"gate": "variance", "threshold": resolved["margin"]}
    # Under the untouched gate nothing changes: its own preset is not the user's, another value is.
    assert spec("margin", resolved["margin"]) == {}
    assert spec("margin", resolved["variance"]) == {"threshold": resolved["variance"]}
