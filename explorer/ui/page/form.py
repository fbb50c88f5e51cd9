"""The Gradio input of each method parameter, as :func:`explorer.ui.page.controls.control_for` describes it.

Kept apart from the page layout so the round trip a user's untouched form makes (the value an
input is given, what the browser sends back, what the handler receives) can be checked for every
registered method without a browser: :func:`handed_back` is that round trip through the
component's own ``postprocess`` and ``preprocess``.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from explorer.ui.page import controls


def param_component(p: controls.Param, value: Any, info: str) -> Any:
    """The input that suits ``p``'s declared type, holding ``value`` (an optional number left empty is None)."""
    c = controls.control_for(p, value)
    if c.kind == controls.CHECKBOX:
        return gr.Checkbox(value=c.value, label=p.name, info=info, elem_id=p.elem_id)
    if c.kind == controls.DROPDOWN:
        return gr.Dropdown(list(p.choices or ()), value=c.value, label=p.name, info=info, elem_id=p.elem_id)
    if c.kind == controls.NUMBER:
        return gr.Number(value=c.value, label=p.name, info=info, elem_id=p.elem_id, min_width=180,
                         step=1 if c.integer else 0.01)
    hint = "comma-separated" + ("; empty: not set" if c.optional else "") if c.kind == controls.LIST else (
        f"empty: not set (the method decides); or {'a whole number' if c.integer else 'a number'}"
        if c.kind == controls.OPTIONAL_NUMBER else "empty: not set (the method decides)" if c.optional else None)
    return gr.Textbox(value=c.value, label=p.name, info=info, elem_id=p.elem_id, placeholder=hint)


def handed_back(component: Any) -> Any:
    """What an untouched input gives the Run handler: its value sent to the page and straight back."""
    return component.preprocess(component.postprocess(component.value))


def shown_value(p: controls.Param, value: Any) -> Any:
    """A config value (a recorded run's, say) as the value to put into ``p``'s input."""
    return controls.control_for(p, value).value
