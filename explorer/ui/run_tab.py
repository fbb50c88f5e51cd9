"""The Run tab: pick or type a question, tick methods, run them, and watch the trace stream in.

Built in three parts so each reads on its own: the question column (sources, a question file,
the text, its gold answer), the run column (retriever, methods, Run/Cancel) with the method
settings, and the recorded runs with the view below. :func:`wire` then connects them: question
picking, streaming runs on the model's queue slot, opening a recorded run and "Run it live".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from explorer.errors import ExplorerError, public_message
from explorer.eval.question_files import question_file_types
from explorer.eval.question_formats import QUESTION_FORMATS
from explorer.retrieval.choice import KINDS, RetrieverConfig, retriever_config
from explorer.ui import controls, forkblock, form, gallery, gallery_block, questions, viewblock
from explorer.ui.controller import RunController, status_html
from explorer.ui.history import TraceCache
from explorer.ui.html import esc
from explorer.ui.render import render_runs

MODEL_QUEUE = "model"
#: Page wiring, not scripting API (explorer/ui/api.py has the public endpoints).
PRIVATE: dict[str, Any] = {"api_visibility": "private"}
QUIET: dict[str, Any] = {**PRIVATE, "show_progress": "hidden"}


def note_html(text: str) -> str:
    return f'<div class="dre-root dre-note">{esc(text)}</div>' if text else ""


def gold_html(q: questions.Question | None) -> str:
    """The gold answer and passages of a picked question, shown under the question box."""
    if q is None:
        return ""
    answers = " | ".join(q.answers)
    passages = ", ".join(q.gold_passages) or "none listed"
    return (f'<div class="dre-root dre-note">Gold answer: <b>{esc(answers)}</b> · gold passages: '
            f"<code>{esc(passages)}</code></div>")


@dataclass
class QuestionControls:
    source: Any
    loaded_files: Any
    data_note: Any
    picked: Any
    question_file: Any
    question_format: Any
    question: Any
    gold: Any


@dataclass
class RunControls:
    retriever: Any
    embedder: Any
    chosen: Any
    run_btn: Any
    cancel_btn: Any
    status: Any


@dataclass
class MethodSettings:
    variants: dict[str, Any]
    params: dict[tuple[str, str], Any]


def build_question_column(opening: questions.Question | None, opening_key: str | None) -> QuestionControls:
    """Where the question comes from; opens on the recorded case study when there is one."""
    start_source = questions.CASES if opening is not None else questions.DEMO
    source = gr.Dropdown(questions.sources(), value=start_source, label="Question source", elem_id="question-source")
    loaded_files = gr.State({})  # this browser's question files (questions.Loaded)
    note = questions.data_note()
    data_note = gr.HTML(note_html(note), visible=bool(note), elem_id="data-note", js_on_load=None)
    picked = gr.Dropdown(questions.choices(start_source), value=opening_key if opening is not None else None,
                         label="Pick a question", elem_id="question-pick")
    with gr.Accordion("Load a question file", open=False, elem_id="question-file-box"):
        with gr.Row():
            question_file = gr.File(label="Question file (.json, .jsonl, .csv, .tsv, .gz)", file_count="single",
                                    type="filepath", file_types=question_file_types(), elem_id="question-file")
            question_format = gr.Dropdown([questions.AUTO_FORMAT, *QUESTION_FORMATS], value=questions.AUTO_FORMAT,
                                          label="Format", elem_id="question-format",
                                          info="detect reads the first record; question-only is 'questions'")
    question = gr.Textbox(opening.question if opening is not None else "", label="Question", lines=2,
                          elem_id="question", placeholder="Type a question, or pick one above (you can edit it)")
    gold = gr.HTML(gold_html(opening), elem_id="gold", js_on_load=None)
    return QuestionControls(source, loaded_files, data_note, picked, question_file, question_format, question, gold)


def build_run_column(corpus: str, start: RetrieverConfig, embedder: str, methods: list[str]) -> RunControls:
    """The retriever beside the corpus, the methods to run, and Run / Cancel."""
    with gr.Row(elem_id="retrieval-row"):
        gr.Textbox(corpus, label="Corpus", interactive=False, elem_id="corpus", scale=2,
                   info="set when the app starts (--corpus)")
        retriever = gr.Dropdown(list(KINDS), value=start.kind, label="Retriever", elem_id="retriever", scale=1,
                                info="bm25, dense (sentence embeddings) or hybrid (both, fused)")
        embedder_box = gr.Textbox(embedder or "embedded", label="Embedder", elem_id="embedder", scale=2,
                                  info="dense/hybrid: a sentence-transformers folder, or 'embedded'")
    chosen = gr.CheckboxGroup([(controls.method_label(m), m) for m in methods], value=["dragin"],
                              label="Methods (several run one after another, side by side)", elem_id="methods")
    with gr.Row():
        run_btn = gr.Button("Run", variant="primary", elem_id="run")
        cancel_btn = gr.Button("Cancel", variant="stop", elem_id="cancel")
    status = gr.HTML(status_html("Ready."), elem_id="run-status", js_on_load=None)
    return RunControls(retriever, embedder_box, chosen, run_btn, cancel_btn, status)


def build_method_settings(methods: list[str], model: str) -> MethodSettings:
    """One tab per method: its variant and every quick parameter, from its config's description.

    Controls start at the loaded model's preset where one exists (shown in the help line), and
    switching the variant moves preset-bearing controls to that variant's value.
    """
    variant_inputs: dict[str, Any] = {}
    param_inputs: dict[tuple[str, str], Any] = {}
    with gr.Tabs(elem_id="method-settings"):
        for method in methods:
            with gr.Tab(method, id=f"settings-{method}", elem_id=f"settings-{method}"):
                gr.Markdown(f"**{controls.method_label(method)}**")
                choices = list(controls.variants(method))
                variant_inputs[method] = gr.Radio(choices, value=choices[0], label="variant",
                                                  elem_id=f"variant-{method}", visible=len(choices) > 1)
                preset_bearing = []
                with gr.Row():
                    for p in controls.params(method):
                        note = controls.preset_note(p, choices[0], model)
                        comp = form.param_component(p, controls.shown_default(p, choices[0], model),
                                                    p.info + (f" · {note}" if note else ""))
                        param_inputs[(method, p.name)] = comp
                        if any(controls.preset_note(p, v, model) for v in choices):
                            preset_bearing.append((p, comp))
                if preset_bearing:
                    def on_variant(variant: str, bearing=tuple(preset_bearing)) -> list[Any]:
                        return [gr.update(value=form.shown_value(p, controls.shown_default(p, variant, model)),
                                          info=p.info + (f" · {n}" if (n := controls.preset_note(p, variant, model))
                                                         else "")) for p, _ in bearing]

                    variant_inputs[method].change(on_variant, variant_inputs[method], [c for _, c in preset_bearing],
                                                  queue=False, **PRIVATE)
    return MethodSettings(variant_inputs, param_inputs)


def wire_questions(qc: QuestionControls) -> None:
    """Sources fill the picker, a picked question fills the text box, a file becomes a source."""
    def on_source(src: str, loaded: questions.Loaded) -> tuple[Any, Any, Any]:
        if src == questions.TYPED:
            return gr.update(choices=[], value=None, visible=False), gr.update(), ""
        try:
            return gr.update(choices=questions.choices(src, loaded), value=None, visible=True), gr.update(), ""
        except ExplorerError as exc:
            return gr.update(choices=[], value=None), gr.update(value=note_html(public_message(exc)), visible=True), ""

    def on_pick(src: str, key: str | None, loaded: questions.Loaded) -> tuple[Any, str]:
        q = questions.find(src, key, loaded)
        if q is None:
            return gr.update(), ""
        return q.question, gold_html(q)

    def on_question_file(path: str | None, fmt: str, loaded: questions.Loaded) -> tuple[Any, Any, Any]:
        if not path:
            return gr.update(), gr.update(), loaded
        mine = dict(loaded or {})
        try:
            key = questions.load_file(path, fmt, loaded=mine)
        except ExplorerError as exc:
            return gr.update(), gr.update(value=note_html(exc.message), visible=True), loaded
        return gr.update(choices=questions.sources(mine), value=key), gr.update(value="", visible=False), mine

    qc.source.change(on_source, [qc.source, qc.loaded_files], [qc.picked, qc.data_note, qc.gold], queue=False,
                     **PRIVATE)
    file_inputs = [qc.question_file, qc.question_format, qc.loaded_files]
    file_outputs = [qc.source, qc.data_note, qc.loaded_files]
    qc.question_file.upload(on_question_file, file_inputs, file_outputs, **PRIVATE)
    qc.question_format.change(on_question_file, file_inputs, file_outputs, **PRIVATE)
    qc.picked.change(on_pick, [qc.source, qc.picked, qc.loaded_files], [qc.question, qc.gold], queue=False, **PRIVATE)


@dataclass
class RunTab:
    """Everything :func:`wire` connects."""

    questions: QuestionControls
    run: RunControls
    settings: MethodSettings
    shelf_block: Any
    view: Any
    methods: list[str]
    model: str


def run_handler(tab: RunTab, controller: RunController, cache: TraceCache) -> Callable[..., Iterator[tuple]]:
    """The Run button's streaming handler; with ``recorded``, that recorded run's question and method."""
    qc, rc, ms, view, methods = tab.questions, tab.run, tab.settings, tab.view, tab.methods

    def question_of(data: dict, recorded: gallery.Item | None) -> tuple[str, dict]:
        q = questions.find(data[qc.source], data[qc.picked], data[qc.loaded_files])
        if recorded is not None:
            q = questions.find(questions.CASES, f"demo:{recorded.question_id}")
        text = (data[qc.question] or "").strip()
        if recorded is not None and q is not None:
            text = q.question
        if not text and q is not None and data[qc.source] != questions.TYPED:
            text = q.question  # picked and run before the text box was filled in
        return text, (questions.gold_of(q) if q is not None and q.question.strip() == text else {})

    def on_run(data: dict, request: gr.Request, recorded: gallery.Item | None = None) -> Iterator[tuple]:
        skip = (gr.skip(), gr.skip(), gr.skip())
        try:
            ticked = sorted(data[rc.chosen] or [], key=lambda m: methods.index(m) if m in methods else len(methods))
            if recorded is not None:
                ticked = [recorded.method]
            specs, refused = controls.plan_runs(ticked, {m: data[c] for m, c in ms.variants.items()},
                                                {k: data[c] for k, c in ms.params.items()}, model=tab.model)
            text, gold_info = question_of(data, recorded)
            if not specs:  # every ticked method refused: a card each, nothing to run
                controller.check_question(text)
                html = render_runs([], refused=[(r.method, r.message) for r in refused])
                status = "; ".join(f"{r.method} not run: {r.message}" for r in refused)
                yield html, status_html(status, error=True), *skip
                return
            choice = retriever_config(data[rc.retriever] or "bm25", (data[rc.embedder] or "").strip() or None)
            updates = controller.stream(text, specs, gold=gold_info, session=request.session_hash or "anonymous",
                                        signal=data[view.signal], retriever=choice.kind, embedder=choice.embedder,
                                        refused=refused)
            for update in updates:
                if update.done:
                    html, state, run_u, theta_u = viewblock.after_show(cache, viewblock.Shown(update.run_ids),
                                                                       data[view.signal])
                    yield html, update.status, state, run_u, theta_u
                else:
                    yield update.html, update.status, *skip
        except ExplorerError as exc:
            yield gr.skip(), status_html(public_message(exc), error=True), *skip

    return on_run


def wire_recorded(tab: RunTab, shelf: gallery.Gallery, cache: TraceCache, on_run: Callable[..., Iterator[tuple]],
                  run_inputs: set, outputs: list) -> None:
    """A recorded run opens with no model call; "Run it live" sets the controls to it and runs it."""
    qc, ms, view, block = tab.questions, tab.settings, tab.view, tab.shelf_block
    block.table.click(gallery_block.opener(shelf, cache), [block.table, view.signal],
                      [view.html, view.state, view.run, view.theta, block.note, block.row, block.key, tab.run.status],
                      queue=False, **QUIET)
    method_params = {m: [(name, c) for (mm, name), c in ms.params.items() if mm == m] for m in tab.methods}
    fill_outputs = [qc.source, qc.picked, qc.question, qc.gold, tab.run.chosen, *ms.variants.values(),
                    *ms.params.values()]

    def fill_from(key: str, src: str) -> list[Any]:
        """The controls set to a recorded run's question, method, variant and settings."""
        item, trace = shelf.item(key), shelf.trace(key)
        if item is None or trace is None:
            return [gr.skip()] * len(fill_outputs)
        q = questions.find(questions.CASES, f"demo:{item.question_id}")
        declared = {p.name: p for p in controls.params(item.method)}
        values = {c: gr.update(value=form.shown_value(declared[name], trace.config[name]))
                  for name, c in method_params.get(item.method, []) if name in trace.config and name in declared}
        return [gr.skip() if src == questions.CASES else questions.CASES,
                f"demo:{item.question_id}", item.question, gold_html(q), [item.method],
                *(trace.variant if m == item.method else gr.skip() for m in ms.variants),
                *(values.get(c, gr.skip()) for c in ms.params.values())]

    def on_run_live(data: dict, request: gr.Request) -> Iterator[tuple]:
        yield from on_run(data, request, recorded=shelf.item(data[block.key]))

    block.live.click(fill_from, [block.key, qc.source], fill_outputs, queue=False, **QUIET).then(
        lambda: gr.update(visible=False), None, block.row, queue=False, **QUIET).then(
        on_run_live, {*run_inputs, block.key}, outputs, concurrency_limit=1, concurrency_id=MODEL_QUEUE, **QUIET)


def wire(tab: RunTab, controller: RunController, cache: TraceCache, shelf: gallery.Gallery) -> None:
    """Connect the tab's controls to the run controller and the recorded runs."""
    qc, rc, ms, view = tab.questions, tab.run, tab.settings, tab.view
    wire_questions(qc)
    run_inputs = {qc.question, qc.source, qc.picked, qc.loaded_files, rc.chosen, view.signal, rc.retriever,
                  rc.embedder, *ms.variants.values(), *ms.params.values()}
    outputs = [view.html, rc.status, view.state, view.run, view.theta]
    on_run = run_handler(tab, controller, cache)

    def on_cancel(request: gr.Request) -> str:
        if controller.cancel(request.session_hash or "anonymous"):
            return status_html("Cancelling … the partial run will be stored.")
        return status_html("Nothing is running.")

    # The recorded-run line goes first: the browser starts a button's handlers in order, and the run streams.
    rc.run_btn.click(lambda: gr.update(visible=False), None, tab.shelf_block.row, queue=False, **QUIET)
    rc.run_btn.click(on_run, run_inputs, outputs, concurrency_limit=1, concurrency_id=MODEL_QUEUE, **QUIET)
    wire_recorded(tab, shelf, cache, on_run, run_inputs, outputs)
    rc.cancel_btn.click(on_cancel, None, rc.status, queue=False, **PRIVATE)


def build(settings: Any, controller: RunController, cache: TraceCache, shelf: gallery.Gallery,
          start: RetrieverConfig, methods: list[str], model: str, head: str) -> RunTab:
    """The Run tab, laid out and wired; opens on the first recorded run when the gallery has one."""
    first = shelf.first
    opening_key = f"demo:{first.question_id}" if first else None
    opening = questions.find(questions.CASES, opening_key) if opening_key else None
    with gr.Tab("Run", id="run", elem_id="tab-run"):
        with gr.Row():
            with gr.Column(scale=3):
                qc = build_question_column(opening, opening_key)
            with gr.Column(scale=2):
                rc = build_run_column(settings.corpus, start, settings.embedder, methods)
        with gr.Accordion("Method settings (the papers' defaults, or the model's preset where there is one; "
                          "each value is checked by the method's config)", open=False, elem_id="settings"):
            ms = build_method_settings(methods, model)
        shelf_block = gallery_block.build(shelf, cache)
        view = viewblock.build("run", cache, head, '<p class="dre-empty">Pick a question and methods, then '
                               "press Run. Tokens appear as the model writes them.</p>",
                               shown=viewblock.Shown([first.run_id]) if first else None,
                               forker=forkblock.Forker(controller))
    tab = RunTab(qc, rc, ms, shelf_block, view, methods, model)
    wire(tab, controller, cache, shelf)
    return tab
