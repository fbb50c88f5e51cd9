"""The Run tab: pick or type a question, tick methods, run them, and watch the trace stream in.

Built in three parts so each reads on its own: the question column (sources, a question file,
the text, its gold answer), the run column (retriever, methods, Run/Cancel) with the method
settings, and the recorded runs with the view below. :func:`wire` then connects them: question
picking, streaming runs on the model's queue slot, opening a recorded run and "Run it live".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from explorer.errors import ExplorerError, public_message
from explorer.eval.question_files import question_file_types
from explorer.eval.question_formats import QUESTION_FORMATS
from explorer.methods.presets import choice_fields
from explorer.retrieval.choice import KINDS, RetrieverConfig, retriever_config
from explorer.ui.page import controls, forkblock, form, gallery_block, links, viewblock, wait_note
from explorer.ui.runs import embedders, gallery, questions
from explorer.ui.runs.controller import RunController, given_name, status_html
from explorer.ui.runs.history import Exports, TraceCache
from explorer.ui.serving.admission import EVENT_LIMIT
from explorer.ui.views import terms
from explorer.ui.views.html import esc
from explorer.ui.views.render import render_runs

MODEL_QUEUE = "model"
#: Page wiring, not scripting API (explorer/ui/api/endpoints.py has the public endpoints).
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


def method_choice(name: str) -> tuple[str, str]:
    """A method's checkbox: its short name (DRAGIN), the full title in the settings tab."""
    return controls.method_label(name).split(" (")[0], name


def build_band(opening: questions.Question | None, methods: list[str]) -> tuple[Any, Any, Any, Any]:
    """The one band of controls a visitor needs: the question, the methods, Run and Cancel."""
    with gr.Row(elem_id="run-band", equal_height=False):
        question = gr.Textbox(opening.question if opening is not None else "", label="Question", lines=2,
                              max_lines=4, elem_id="question", scale=4, min_width=280,
                              placeholder="Type a question, or open Settings to pick one (you can edit it)")
        chosen = gr.CheckboxGroup([method_choice(m) for m in methods], value=["dragin"],
                                  label="Methods (tick several to compare them side by side)", elem_id="methods",
                                  scale=8, min_width=300)
        words = json.dumps({m: f"{method_choice(m)[0]}: {controls.method_words(m)}" for m in methods})
        # what each method does, for the page script to put on its checkbox (hover, focus, screen readers)
        marks = json.dumps({m: terms.term(f"method-{m}", "?") for m in methods if terms.method_sentence(m)})
        gr.HTML(f'<span hidden id="method-words" data-words="{esc(words)}" data-terms="{esc(marks)}"></span>',
                elem_id="method-words-box",
                visible="hidden", js_on_load=None)
        with gr.Column(scale=0, min_width=112, elem_id="run-buttons"):
            run_btn = gr.Button("Run", variant="primary", elem_id="run", size="md")
            cancel_btn = gr.Button("Cancel", variant="stop", elem_id="cancel", size="sm")
    return question, chosen, run_btn, cancel_btn


def build_sources(opening: questions.Question | None, opening_key: str | None) -> tuple[Any, ...]:
    """Where the question comes from (in Settings); opens on the recorded case study when there is one."""
    start_source = questions.CASES if opening is not None else questions.DEMO
    with gr.Row():
        source = gr.Dropdown(questions.sources(), value=start_source, label="Question source",
                             elem_id="question-source", scale=1)
        picked = gr.Dropdown(questions.choices(start_source), value=opening_key if opening is not None else None,
                             label="Pick a question", elem_id="question-pick", scale=3)
    loaded_files = gr.State({})  # this browser's question files (questions.Loaded)
    note = questions.data_note()
    data_note = gr.HTML(note_html(note), visible=bool(note), elem_id="data-note", js_on_load=None)
    gold = gr.HTML(gold_html(opening), elem_id="gold", js_on_load=None)
    with gr.Accordion("Load a question file", open=False, elem_id="question-file-box"):
        with gr.Row():
            question_file = gr.File(label="Question file (.json, .jsonl, .csv, .tsv, .gz)", file_count="single",
                                    type="filepath", file_types=question_file_types(), elem_id="question-file")
            question_format = gr.Dropdown([questions.AUTO_FORMAT, *QUESTION_FORMATS], value=questions.AUTO_FORMAT,
                                          label="Format", elem_id="question-format",
                                          info="detect reads the first record; question-only is 'questions'")
    return source, loaded_files, data_note, picked, question_file, question_format, gold


def build_retriever_row(corpus: str, start: RetrieverConfig, embedder: str) -> tuple[Any, Any]:
    """The retriever beside the corpus (in Settings); both named as visitors may see them, never by a server path."""
    offered = " or ".join(embedders.page_embedders(embedder))
    with gr.Row(elem_id="retrieval-row"):
        gr.Textbox(given_name(corpus), label="Corpus", interactive=False, elem_id="corpus", scale=2,
                   info="set when the app starts (--corpus)")
        retriever = gr.Dropdown(list(KINDS), value=start.kind, label="Retriever", elem_id="retriever", scale=1,
                                info="bm25, dense (sentence embeddings) or hybrid (both, fused)")
        embedder_box = gr.Textbox(embedders.shown_embedder(embedder), label="Embedder", elem_id="embedder", scale=2,
                                  info=f"dense/hybrid: {offered} (set when the app starts, --embedder)")
    return retriever, embedder_box


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
                picks: dict[str, set[Any]] = {}  # each field that picks a preset, with its values that have one
                for v in choices:
                    for name, options in choice_fields(model, method, v).items():
                        picks.setdefault(name, set()).update(options)
                with gr.Row():
                    for p in controls.params(method):
                        note = controls.preset_note(p, choices[0], model)
                        comp = form.param_component(p, controls.shown_default(p, choices[0], model),
                                                    p.info + (f" · {note}" if note else ""))
                        param_inputs[(method, p.name)] = comp
                        starts = {repr(controls.shown_default(p, v, model, {name: o}))
                                  for v in choices for name, options in picks.items() for o in options}
                        if p.name not in picks and (len(starts) > 1 or any(controls.preset_note(p, v, model)
                                                                           for v in choices)):
                            preset_bearing.append((p, comp))
                if preset_bearing:
                    pickers = [(p, param_inputs[(method, p.name)]) for p in controls.params(method) if p.name in picks]

                    def on_choice(variant: str, *picked: Any, bearing=tuple(preset_bearing),
                                  pickers=tuple(pickers)) -> Any:
                        """Move the preset-bearing controls to the value the variant and the choices made resolve."""
                        chosen = {p.name: controls.value_from_control(p, v) for (p, _), v in zip(pickers, picked,
                                                                                                   strict=True)}
                        updates = [gr.update(value=form.shown_value(p, controls.shown_default(p, variant, model,
                                                                                              chosen)),
                                             info=p.info + (f" · {n}" if (n := controls.preset_note(p, variant, model,
                                                                                                    chosen)) else ""))
                                   for p, _ in bearing]
                        # One output takes the returned value whole: a list of one would become its value.
                        return updates[0] if len(updates) == 1 else updates

                    inputs = [variant_inputs[method], *(c for _, c in pickers)]
                    for trigger in inputs:
                        trigger.change(on_choice, inputs, [c for _, c in preset_bearing], queue=False, **PRIVATE)
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
            return gr.update(), gr.update(value=note_html(public_message(exc)), visible=True), loaded
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
    #: The hidden component the case-study links send through (``DRE.senders["run:link"]``).
    link: Any = None
    #: (handler, inputs, outputs) that open the page's link (?run=, ?compare=, ?case=) when it loads.
    on_load: Any = None
    #: The embedders the page offers, by the name it shows (:mod:`explorer.ui.runs.embedders`).
    embedders: dict[str, str] = field(default_factory=lambda: embedders.page_embedders(None))
    #: The line beside the status: how long a live run of the ticked methods takes here (:mod:`.wait_note`).
    wait: Any = None


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
            choice = retriever_config(data[rc.retriever] or "bm25",
                                      embedders.page_embedder(data[rc.embedder], tab.embedders))
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
                  run_inputs: set, outputs: list) -> Any:
    """Links open runs, comparisons and recorded cases with no model call; "Run it live" sets the controls
    to the recorded run and runs it (returned: that run's event, for what follows it)."""
    qc, ms, view, block = tab.questions, tab.settings, tab.view, tab.shelf_block
    method_params = {m: [(name, c) for (mm, name), c in ms.params.items() if mm == m] for m in tab.methods}
    fill_outputs = [qc.source, qc.picked, qc.question, qc.gold, tab.run.chosen, *ms.variants.values(),
                    *ms.params.values()]

    def fill_from(key: str, src: str) -> list[Any]:
        """The controls set to a recorded run's question, method, variant and settings."""
        item, trace = shelf.item(key), shelf.trace(key)
        if item is None or trace is None:
            return [gr.skip()] * len(fill_outputs)
        q = questions.find(questions.CASES, f"demo:{item.question_id}")
        settings = gallery.live_settings(trace, tab.model)  # a preset of another model is not carried over
        declared = {p.name: p for p in controls.params(item.method)}
        values = {c: gr.update(value=form.shown_value(declared[name], settings[name]))
                  for name, c in method_params.get(item.method, []) if name in settings and name in declared}
        return [gr.skip() if src == questions.CASES else questions.CASES,
                f"demo:{item.question_id}", item.question, gold_html(q), [item.method],
                *(trace.variant if m == item.method else gr.skip() for m in ms.variants),
                *(values.get(c, gr.skip()) for c in ms.params.values())]

    link_outputs = [view.html, view.state, view.run, view.theta, block.note, block.row, block.key, tab.run.status,
                    *fill_outputs]

    def open_params(params: dict[str, Any], signal: str, src: str) -> list[Any]:
        """What a link opens (``?run=``, ``?compare=``, ``?case=``), with the controls set to its question."""
        nothing = [gr.skip()] * len(link_outputs)
        try:
            opened = links.open_link(params, cache, shelf)
        except ExplorerError as exc:
            return [*nothing[:7], status_html(links.link_problem(exc), error=True),
                    *nothing[8:]]
        if opened is None:
            return nothing
        html, state, run_u, theta_u = viewblock.after_show(cache, opened.shown, signal)
        item = opened.item
        if item is not None:
            fill = fill_from(item.key, src)
        else:
            shown = viewblock.traces(cache, opened.shown)
            ticked = [m for m in dict.fromkeys(t.method for t in shown) if m in tab.methods]
            fill = [gr.skip(), gr.skip(), shown[-1].question if shown else gr.skip(), gr.skip(),
                    ticked or gr.skip(), *([gr.skip()] * (len(fill_outputs) - 5))]
        note = gallery_block.recorded_note(item, shelf) if item is not None else gr.skip()
        return [html, state, run_u, theta_u, note, gr.update(visible=item is not None),
                item.key if item is not None else gr.skip(), status_html(opened.status), *fill]

    def on_link(text: str, signal: str, src: str) -> list[Any]:
        try:
            data = json.loads(text or "{}")
        except ValueError:
            data = {}
        return open_params(data if isinstance(data, dict) else {}, signal, src)

    def on_load(signal: str, src: str, request: gr.Request) -> list[Any]:
        return open_params(dict(request.query_params or {}), signal, src)

    tab.link.submit(on_link, [tab.link, view.signal, qc.source], link_outputs, queue=False, **QUIET)
    tab.on_load = (on_load, [view.signal, qc.source], link_outputs)

    def on_run_live(data: dict, request: gr.Request) -> Iterator[tuple]:
        yield from on_run(data, request, recorded=shelf.item(data[block.key]))

    return block.live.click(fill_from, [block.key, qc.source], fill_outputs, queue=False, **QUIET).then(
        lambda: gr.update(visible=False), None, block.row, queue=False, **QUIET).then(
        on_run_live, {*run_inputs, block.key}, outputs, concurrency_limit=EVENT_LIMIT, concurrency_id=MODEL_QUEUE,
        **QUIET)


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
    rc.run_btn.click(lambda: gr.update(visible=False), None, tab.shelf_block.row, queue=False,
                     js="() => { window.DRE && window.DRE.follow && window.DRE.follow('run'); }", **QUIET)
    ran = rc.run_btn.click(on_run, run_inputs, outputs, concurrency_limit=EVENT_LIMIT, concurrency_id=MODEL_QUEUE,
                           **QUIET)
    ran_live = wire_recorded(tab, shelf, cache, on_run, run_inputs, outputs)
    rc.cancel_btn.click(on_cancel, None, rc.status, queue=False, **PRIVATE)
    if tab.wait is not None:  # the wait told before a run follows the ticks, and each run that ends
        def told(picked: list[str] | None) -> str:
            return wait_note.wait_html(controller, shelf, list(picked or []))

        rc.chosen.change(told, rc.chosen, tab.wait, queue=False, **QUIET)
        for event in (ran, ran_live):
            event.then(told, rc.chosen, tab.wait, queue=False, **QUIET)


def captions_of(shelf: gallery.Gallery, shown: list[Any]) -> str:
    """The captions of the recorded case studies among ``shown`` runs (a contrast shown beside its run is told
    in that run's caption), so an export of a recorded case keeps what the page said about it."""
    ids = {t.run_id for t in shown}
    items = [i for i in shelf.items if i.run_id in ids]
    told_beside = {i.beside for i in items if i.beside}
    return "".join(gallery_block.case_story_html(i, shelf) for i in items if i.key not in told_beside)


def build_exports(view: Any, cache: TraceCache, exports: Exports, shelf: gallery.Gallery | None = None) -> None:
    """Exports of what the view shows (a run, a comparison, a fork beside its parent; recorded runs too, with
    their case study's caption)."""
    with gr.Row(elem_id="run-exports", equal_height=True):
        html_btn = gr.Button("Export HTML report", size="sm", elem_id="run-export-html", scale=0, min_width=160)
        slides_btn = gr.Button("Export for slides", size="sm", elem_id="run-export-slides", scale=0, min_width=160)
        json_btn = gr.Button("Export trace JSON", size="sm", elem_id="run-export-json", scale=0, min_width=160)
        file = gr.File(label="Exported file (click to download)", interactive=False, elem_id="run-export-file",
                       height=90, scale=1, visible=False)  # shown with its first file
    note = gr.HTML("", elem_id="run-export-status", js_on_load=None)

    def export(kind: str, state: Any, signal: str) -> tuple[Any, str]:
        shown = viewblock.traces(cache, viewblock.Shown.of(state))
        if not shown:
            return gr.skip(), status_html("Nothing to export: open or run something first.", error=True)
        if kind == "json":
            return (gr.update(value=exports.trace_json(shown[-1]), visible=True),
                    status_html(f"Trace of run {shown[-1].run_id[:12]} exported."))
        what = "Slides" if kind == "slides" else "HTML report"
        above = captions_of(shelf, shown) if shelf is not None else ""
        return (gr.update(value=exports.report(shown, signal, slides=kind == "slides", above=above), visible=True),
                status_html(f"{what} of {len(shown)} run(s) exported: one file that opens offline."))

    for kind, button in (("html", html_btn), ("slides", slides_btn), ("json", json_btn)):
        button.click(lambda st, sig, k=kind: export(k, st, sig), [view.state, view.signal], [file, note], **QUIET)


def build(settings: Any, controller: RunController, cache: TraceCache, shelf: gallery.Gallery,
          start: RetrieverConfig, methods: list[str], model: str, head: str, exports: Exports) -> RunTab:
    """The Run tab, laid out results first: one band of controls, the case studies, then the view.

    At 1280x720 the opened run's token strip is on the first screen: the question, the methods and
    Run share one band, everything else (question sources, retriever, method settings) is folded
    under Settings, and the view's own controls sit beside what they change.
    """
    first = shelf.first
    opening_key = f"demo:{first.question_id}" if first else None
    opening = questions.find(questions.CASES, opening_key) if opening_key else None
    with gr.Tab("Run", id="run", elem_id="tab-run"):
        question, chosen, run_btn, cancel_btn = build_band(opening, methods)
        with gr.Accordion("Settings: question source, retriever, each method's parameters", open=False,
                          elem_id="settings"):
            source, loaded, data_note, picked, question_file, question_format, gold = build_sources(opening,
                                                                                                  opening_key)
            retriever, embedder = build_retriever_row(settings.corpus, start, settings.embedder)
            gr.HTML('<p class="dre-root dre-note">Each method\'s parameters start at the paper\'s default, or the '
                    "model's preset where there is one; each value is checked by the method's config.</p>",
                    js_on_load=None)
            ms = build_method_settings(methods, model)
        shelf_block = gallery_block.build(shelf, cache)
        with gr.Row(elem_id="run-lines", equal_height=False):
            status = gr.HTML(status_html("Ready."), elem_id="run-status", js_on_load=None, scale=2)
            # Told again as each page opens (app.py's private load event: a callable value here would be a
            # public API endpoint of its own), when the ticks change and when a run ends.
            wait = gr.HTML(wait_note.wait_html(controller, shelf, ["dragin"]), elem_id="wait-note",
                           js_on_load=None, scale=3)
        view = viewblock.build("run", cache, head, '<p class="dre-empty">Pick a question and methods, then '
                               "press Run. Tokens appear as the model writes them.</p>",
                               shown=links.shown_for(first, shelf) if first else None,
                               forker=forkblock.Forker(controller),
                               # a fork is a new run made now: the recorded run's line does not stay above it
                               on_fork=lambda fork: fork.request.submit(lambda: gr.update(visible=False), None,
                                                                        shelf_block.row, queue=False, **QUIET))
        build_exports(view, cache, exports, shelf)
        link = gr.HTML("", html_template="<span hidden></span>", js_on_load=forkblock.sender_js("run", "link"),
                       elem_id="run-link-request", visible="hidden")
    qc = QuestionControls(source, loaded, data_note, picked, question_file, question_format, question, gold)
    rc = RunControls(retriever, embedder, chosen, run_btn, cancel_btn, status)
    tab = RunTab(qc, rc, ms, shelf_block, view, methods, model, link=link,
                 embedders=embedders.page_embedders(settings.embedder), wait=wait)
    wire(tab, controller, cache, shelf)
    return tab
