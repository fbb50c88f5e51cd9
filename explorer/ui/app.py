"""The web app's layout: the Run tab (question, methods, parameters, streamed view), History, help.

:func:`build_app` wires the pieces: question sources (:mod:`~explorer.ui.questions`), parameter
controls built from each config (:mod:`~explorer.ui.controls`), the streaming run controller
(:mod:`~explorer.ui.controller`), the stored-run views (:mod:`~explorer.ui.viewblock`), the
History tab (:mod:`~explorer.ui.history_tab`) and the scripting API (:mod:`~explorer.ui.api`).
Model runs share one queue slot (``concurrency_id="model"``), so concurrent users wait their
turn instead of interleaving on one model.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402  (analytics must be off before gradio is imported)

from explorer.errors import ExplorerError, public_message  # noqa: E402
from explorer.eval.question_files import question_file_types  # noqa: E402
from explorer.eval.question_formats import QUESTION_FORMATS  # noqa: E402
from explorer.methods.base import method_names  # noqa: E402
from explorer.paths import ASSETS_DIR  # noqa: E402
from explorer.store import RunStore  # noqa: E402
from explorer.ui import api, controls, gallery, gallery_block, history_tab, questions, viewblock  # noqa: E402
from explorer.ui.controller import RunController, RuntimeHolder, status_html  # noqa: E402
from explorer.ui.evaluations import build_evaluations_tab  # noqa: E402
from explorer.ui.history import Exports, TraceCache  # noqa: E402
from explorer.ui.html import esc  # noqa: E402
from explorer.ui.report import EXPLORER_JS, PLOTLY_JS  # noqa: E402

log = logging.getLogger("explorer.ui")

MODEL_QUEUE = "model"
HELP = (ASSETS_DIR / "help.md")


@dataclass
class AppSettings:
    db: Path
    model: str = "embedded"
    corpus: str = "demo"
    preload: bool = True
    #: Reuse the states of a prompt opening shared with a recent prompt (:mod:`explorer.engine.prefix_cache`).
    prefix_cache: bool = True
    retriever: str = "bm25"
    embedder: str = ""
    attn: str = "auto"


def head_html() -> str:
    """Scripts every view needs, served by the app itself from the installed packages (no CDN)."""
    gr.set_static_paths([PLOTLY_JS, EXPLORER_JS])
    return (f'<script src="gradio_api/file={PLOTLY_JS}"></script>'
            f'<script src="gradio_api/file={EXPLORER_JS}"></script>')


def _note(text: str) -> str:
    return f'<div class="dre-root dre-note">{esc(text)}</div>' if text else ""


def css_paths() -> list[Path]:
    return [ASSETS_DIR / "explorer.css", ASSETS_DIR / "app.css"]


def gold_html(q: questions.Question | None) -> str:
    """The gold answer and passages of a picked question, shown under the question box."""
    if q is None:
        return ""
    answers = " | ".join(q.answers)
    passages = ", ".join(q.gold_passages) or "none listed"
    return (f'<div class="dre-root dre-note">Gold answer: <b>{esc(answers)}</b> · gold passages: '
            f"<code>{esc(passages)}</code></div>")


def warm_up(question: str, method: str = "dragin") -> Any:
    """A short run of the method and question the page opens with, before the model is offered.

    Not stored. It pays, at start-up, for what the first real run would otherwise wait on (the
    first forward passes, lazily built tables), so Run shows a first token at once.
    """
    def warm(runtime: Any) -> None:
        from explorer.methods.base import run_question

        try:
            run_question(method, question, runtime, config={"max_length": 8, "answer_tokens": 2})
        except ExplorerError as exc:  # a model or corpus the method cannot use: the real run will say so
            log.info("warm-up run skipped: %s", exc.message)

    return warm


def _method_settings(methods: list[str], model: str) -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
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
                        value = controls.shown_default(p, choices[0], model)
                        note = controls.preset_note(p, choices[0], model)
                        info = p.info + (f" · {note}" if note else "")
                        if p.type == "bool":
                            comp = gr.Checkbox(value=bool(value), label=p.name, info=info, elem_id=p.elem_id)
                        elif p.choices:
                            comp = gr.Dropdown(list(p.choices), value=value, label=p.name, info=info,
                                               elem_id=p.elem_id)
                        elif p.type in ("int", "float"):
                            comp = gr.Number(value=value, label=p.name, info=info, elem_id=p.elem_id,
                                             step=1 if p.type == "int" else 0.01, min_width=180)
                        else:
                            comp = gr.Textbox(value=str(value), label=p.name, info=info, elem_id=p.elem_id)
                        param_inputs[(method, p.name)] = comp
                        if any(controls.preset_note(p, v, model) for v in choices):
                            preset_bearing.append((p, comp))
                if preset_bearing:
                    def on_variant(variant: str, bearing=tuple(preset_bearing)) -> list[Any]:
                        return [gr.update(value=controls.shown_default(p, variant, model),
                                          info=p.info + (f" · {n}" if (n := controls.preset_note(p, variant, model))
                                                         else "")) for p, _ in bearing]

                    variant_inputs[method].change(on_variant, variant_inputs[method], [c for _, c in preset_bearing],
                                                  api_visibility="private", queue=False)
    return variant_inputs, param_inputs


def _retargeter(corpus: str):
    """The loaded engine joined to another retriever of the app's corpus (opened once, then shared)."""
    def retarget(runtime: Any, kind: str, embedder: str | None) -> Any:
        from explorer.runtime import runtime_for

        current = runtime.corpus.get("retriever_config") or {"kind": runtime.corpus.get("retriever", "bm25")}
        wanted = {"kind": kind, "embedder": embedder or "embedded"}
        if current.get("kind") == kind and (kind == "bm25" or current.get("embedder") == wanted["embedder"]):
            return runtime
        return runtime_for(runtime.engine, corpus, retriever=kind, embedder=embedder)

    return retarget


def build_app(settings: AppSettings) -> gr.Blocks:
    store = RunStore(settings.db)
    from explorer.retrieval.choice import KINDS, retriever_config
    from explorer.runtime import open_runtime

    start_choice = retriever_config(settings.retriever, settings.embedder or None)  # a bad option fails at start
    shelf = gallery.load()
    if shelf.problem:
        log.warning("%s", shelf.problem)
    first = shelf.first
    opening_key = f"demo:{first.question_id}" if first else None
    opening = questions.find(questions.CASES, opening_key) if opening_key else None
    def open_app_runtime() -> Any:
        from explorer.engine.prefix_cache import PrefixCache

        runtime = open_runtime(settings.model, settings.corpus, retriever=start_choice, attn=settings.attn,
                               progress=holder.note)
        # The methods' prompts open with the same instruction and exemplars: encode those once.
        if settings.prefix_cache:
            runtime.engine.prefix_cache = PrefixCache()
        return runtime

    holder = RuntimeHolder(open_app_runtime,
                           describe=f"model {settings.model}, corpus {settings.corpus}, retriever {start_choice.label}",
                           warm=warm_up(opening.question) if opening is not None else None)
    if settings.preload:
        holder.start()
    controller = RunController(store, holder, retarget=_retargeter(settings.corpus))
    cache = TraceCache(store)
    exports = Exports()
    methods = method_names()
    model_name = controls.model_name(settings.model)
    head = head_html()

    # Files handed to the browser (exports) are copied into Gradio's cache: deleted after an hour.
    with gr.Blocks(title="Dynamic RAG Explorer", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
        gr.HTML('<div class="dre-apphead"><b>Dynamic RAG Explorer</b> · see why a language model retrieves when '
                "it does</div>", elem_id="app-title", js_on_load=None)
        model_status = gr.HTML(_note(holder.status()), elem_id="model-status", js_on_load=None)
        with gr.Tabs(elem_id="tabs"):
            with gr.Tab("Run", id="run", elem_id="tab-run"):
                with gr.Row():
                    with gr.Column(scale=3):
                        start_source = questions.CASES if opening is not None else questions.DEMO
                        source = gr.Dropdown(questions.sources(), value=start_source, label="Question source",
                                             elem_id="question-source")
                        loaded_files = gr.State({})  # this browser's question files (questions.Loaded)
                        note = questions.data_note()
                        data_note = gr.HTML(_note(note), visible=bool(note), elem_id="data-note", js_on_load=None)
                        picked = gr.Dropdown(questions.choices(start_source),
                                             value=opening_key if opening is not None else None,
                                             label="Pick a question", elem_id="question-pick")
                        with gr.Accordion("Load a question file", open=False, elem_id="question-file-box"):
                            with gr.Row():
                                question_file = gr.File(label="Question file (.json, .jsonl, .csv, .tsv, .gz)",
                                                        file_count="single", type="filepath",
                                                        file_types=question_file_types(),
                                                        elem_id="question-file")
                                question_format = gr.Dropdown(
                                    [questions.AUTO_FORMAT, *QUESTION_FORMATS], value=questions.AUTO_FORMAT,
                                    label="Format", elem_id="question-format",
                                    info="detect reads the first record; question-only is 'questions'")
                        question = gr.Textbox(opening.question if opening is not None else "", label="Question",
                                              lines=2, elem_id="question",
                                              placeholder="Type a question, or pick one above (you can edit it)")
                        gold = gr.HTML(gold_html(opening), elem_id="gold", js_on_load=None)
                    with gr.Column(scale=2):
                        with gr.Row(elem_id="retrieval-row"):
                            gr.Textbox(settings.corpus, label="Corpus", interactive=False, elem_id="corpus",
                                       scale=2, info="set when the app starts (--corpus)")
                            retriever = gr.Dropdown(list(KINDS), value=start_choice.kind, label="Retriever",
                                                    elem_id="retriever", scale=1,
                                                    info="bm25, dense (sentence embeddings) or hybrid (both, fused)")
                            embedder = gr.Textbox(settings.embedder or "embedded", label="Embedder",
                                                  elem_id="embedder", scale=2,
                                                  info="dense/hybrid: a sentence-transformers folder, or 'embedded'")
                        chosen = gr.CheckboxGroup([(controls.method_label(m), m) for m in methods], value=["dragin"],
                                                  label="Methods (several run one after another, side by side)",
                                                  elem_id="methods")
                        with gr.Row():
                            run_btn = gr.Button("Run", variant="primary", elem_id="run")
                            cancel_btn = gr.Button("Cancel", variant="stop", elem_id="cancel")
                        status = gr.HTML(status_html("Ready."), elem_id="run-status", js_on_load=None)
                with gr.Accordion("Method settings (the papers' defaults, or the model's preset where there is one; "
                                  "each value is checked by the method's config)", open=False, elem_id="settings"):
                    variant_inputs, param_inputs = _method_settings(methods, model_name)
                shelf_block = gallery_block.build(shelf, cache)
                view = viewblock.build("run", cache, head, '<p class="dre-empty">Pick a question and methods, then '
                                       "press Run. Tokens appear as the model writes them.</p>",
                                       shown=viewblock.Shown([first.run_id]) if first else None)
            history_tab.build(store, cache, exports, head)
            with gr.Tab("Evaluations", id="evaluations", elem_id="tab-evaluations"):
                evaluations = build_evaluations_tab(store)
                eval_view = viewblock.build("evaluations", cache, head, '<p class="dre-empty">Pick an evaluation, '
                                            "a cell of its table, then a question: its run opens here.</p>")
                evaluations.run_id.change(
                    lambda run_id, signal: viewblock.after_show(cache, viewblock.Shown([run_id] if run_id else []),
                                                                signal),
                    [evaluations.run_id, eval_view.signal],
                    [eval_view.html, eval_view.state, eval_view.run, eval_view.theta],
                    api_visibility="private", show_progress="hidden")
            with gr.Tab("How to read", id="help", elem_id="tab-help"):
                gr.Markdown(HELP.read_text(encoding="utf-8"))
        api.register(controller, store, model_name)

        # -- question picking ---------------------------------------------------------------
        def on_source(src: str, loaded: questions.Loaded) -> tuple[Any, Any, Any]:
            if src == questions.TYPED:
                return gr.update(choices=[], value=None, visible=False), gr.update(), ""
            try:
                return (gr.update(choices=questions.choices(src, loaded), value=None, visible=True), gr.update(),
                        "")
            except ExplorerError as exc:
                return gr.update(choices=[], value=None), gr.update(value=_note(public_message(exc)), visible=True), ""

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
                return gr.update(), gr.update(value=_note(exc.message), visible=True), loaded
            return (gr.update(choices=questions.sources(mine), value=key), gr.update(value="", visible=False),
                    mine)

        source.change(on_source, [source, loaded_files], [picked, data_note, gold], api_visibility="private",
                      queue=False)
        file_inputs = [question_file, question_format, loaded_files]
        question_file.upload(on_question_file, file_inputs, [source, data_note, loaded_files],
                             api_visibility="private")
        question_format.change(on_question_file, file_inputs, [source, data_note, loaded_files],
                               api_visibility="private")
        picked.change(on_pick, [source, picked, loaded_files], [question, gold], api_visibility="private",
                      queue=False)

        # -- running ------------------------------------------------------------------------
        run_inputs = {question, source, picked, loaded_files, chosen, view.signal, retriever, embedder,
                      *variant_inputs.values(), *param_inputs.values()}
        outputs = [view.html, status, view.state, view.run, view.theta]

        def on_run(data: dict, request: gr.Request, recorded: gallery.Item | None = None):
            """Run the ticked methods; with ``recorded``, that recorded run's question and method again."""
            skip = (gr.skip(), gr.skip(), gr.skip())
            try:
                ticked = sorted(data[chosen] or [], key=lambda m: methods.index(m) if m in methods else len(methods))
                if recorded is not None:
                    ticked = [recorded.method]
                specs = controls.build_specs(ticked,
                                             {m: data[c] for m, c in variant_inputs.items()},
                                             {k: data[c] for k, c in param_inputs.items()}, model=model_name)
                q = questions.find(data[source], data[picked], data[loaded_files])
                if recorded is not None:
                    q = questions.find(questions.CASES, f"demo:{recorded.question_id}")
                text = (data[question] or "").strip()
                if recorded is not None and q is not None:
                    text = q.question
                if not text and q is not None and data[source] != questions.TYPED:
                    text = q.question  # picked and run before the text box was filled in
                gold_info = questions.gold_of(q) if q is not None and q.question.strip() == text else {}
                choice = retriever_config(data[retriever] or "bm25", (data[embedder] or "").strip() or None)
                updates = controller.stream(text, specs, gold=gold_info, session=request.session_hash or "anonymous",
                                            signal=data[view.signal], retriever=choice.kind, embedder=choice.embedder)
                for update in updates:
                    if update.done:
                        shown = viewblock.Shown(update.run_ids)
                        html, state, run_u, theta_u = viewblock.after_show(cache, shown, data[view.signal])
                        yield html, update.status, state, run_u, theta_u
                    else:
                        yield update.html, update.status, *skip
            except ExplorerError as exc:
                yield gr.skip(), status_html(public_message(exc), error=True), *skip

        def on_cancel(request: gr.Request) -> str:
            if controller.cancel(request.session_hash or "anonymous"):
                return status_html("Cancelling … the partial run will be stored.")
            return status_html("Nothing is running.")

        # The recorded-run line goes first: the browser starts a button's handlers in order, and the run streams.
        run_btn.click(lambda: gr.update(visible=False), None, shelf_block.row, queue=False, api_visibility="private",
                      show_progress="hidden")
        run_btn.click(on_run, run_inputs, outputs, concurrency_limit=1, concurrency_id=MODEL_QUEUE,
                      show_progress="hidden", api_visibility="private")

        # -- recorded runs ------------------------------------------------------------------
        shelf_block.table.click(gallery_block.opener(shelf, cache), [shelf_block.table, view.signal],
                                [view.html, view.state, view.run, view.theta, shelf_block.note, shelf_block.row,
                                 shelf_block.key, status], queue=False, api_visibility="private",
                                show_progress="hidden")
        method_params = {m: [(name, c) for (mm, name), c in param_inputs.items() if mm == m] for m in methods}
        fill_outputs = [source, picked, question, gold, chosen, *variant_inputs.values(), *param_inputs.values()]

        def fill_from(key: str, src: str) -> list[Any]:
            """The controls set to a recorded run's question, method, variant and settings."""
            item, trace = shelf.item(key), shelf.trace(key)
            if item is None or trace is None:
                return [gr.skip()] * len(fill_outputs)
            q = questions.find(questions.CASES, f"demo:{item.question_id}")
            values = {c: gr.update(value=trace.config[name]) for name, c in method_params.get(item.method, [])
                      if name in trace.config}
            return [gr.skip() if src == questions.CASES else questions.CASES,
                    f"demo:{item.question_id}", item.question, gold_html(q), [item.method],
                    *(trace.variant if m == item.method else gr.skip() for m in variant_inputs),
                    *(values.get(c, gr.skip()) for c in param_inputs.values())]

        def on_run_live(data: dict, request: gr.Request):
            item = shelf.item(data[shelf_block.key])
            yield from on_run(data, request, recorded=item)

        shelf_block.live.click(fill_from, [shelf_block.key, source], fill_outputs, queue=False,
                               api_visibility="private", show_progress="hidden").then(
            lambda: gr.update(visible=False), None, shelf_block.row, queue=False, api_visibility="private",
            show_progress="hidden").then(
            on_run_live, {*run_inputs, shelf_block.key}, outputs, concurrency_limit=1, concurrency_id=MODEL_QUEUE,
            show_progress="hidden", api_visibility="private")
        cancel_btn.click(on_cancel, None, status, queue=False, api_visibility="private")

        # -- model status -------------------------------------------------------------------
        timer = gr.Timer(1.0, active=not holder.ready)

        def poll() -> tuple[str, Any]:
            return _note(holder.status()), gr.Timer(active=holder.state not in ("ready", "failed"))

        timer.tick(poll, None, [model_status, timer], api_visibility="private", queue=False, show_progress="hidden")
    return demo


def launch(demo: gr.Blocks, *, host: str, port: int, auth: tuple[str, str] | None = None,
           quiet: bool = False, uploads: bool | None = None) -> None:
    """Serve with a bounded queue and nothing fetched from outside (no analytics, no CDN, no SSR).

    The :mod:`~explorer.ui.guard` middleware sits in front: no API schema routes, uploads only
    when a component takes files (``uploads=None`` decides from the layout), and a backoff on
    repeated wrong passwords.
    """
    from starlette.middleware import Middleware

    from explorer.ui.guard import MAX_UPLOAD, Guard, GuardSettings, needs_uploads, upload_suffixes

    allow = needs_uploads(demo) if uploads is None else uploads
    guard = Middleware(Guard, settings=GuardSettings(uploads=allow, login=auth is not None,
                                                     upload_suffixes=upload_suffixes(demo)))
    demo.queue(default_concurrency_limit=4, max_size=64).launch(
        server_name=host, server_port=port, auth=auth, show_error=False, quiet=quiet, ssr_mode=False,
        footer_links=["api"], pwa=False, mcp_server=False, css_paths=css_paths(), theme=gr.themes.Default(),
        allowed_paths=[], run_history=False, max_file_size=MAX_UPLOAD if allow else None,
        app_kwargs={"docs_url": None, "redoc_url": None, "openapi_url": None, "middleware": [guard]})
