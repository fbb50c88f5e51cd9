"""The web app's page: the Run tab, History, Evaluations, help, and the scripting API.

:func:`build_app` assembles the tabs, each built by its own module: the Run tab
(:mod:`~explorer.ui.page.run_tab`: question sources, methods, settings, recorded runs, the streamed
view), History (:mod:`~explorer.ui.page.history_tab`), Evaluations (:mod:`~explorer.ui.page.evaluations`)
and the public endpoints (:mod:`~explorer.ui.api.endpoints`); the model loads in the background from
server start (:class:`~explorer.ui.runs.controller.RuntimeHolder`).
Model runs go through one gate (:mod:`~explorer.ui.serving.admission`): a few at once, their decode
steps sharing one batch on the model, and the rest in line, told their place and an estimate.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402  (analytics must be off before gradio is imported)

from explorer.errors import ExplorerError  # noqa: E402
from explorer.methods.base import method_names  # noqa: E402
from explorer.paths import ASSETS_DIR  # noqa: E402
from explorer.store import RunStore  # noqa: E402
from explorer.ui.api import endpoints as api  # noqa: E402
from explorer.ui.page import controls, forkblock, history_tab, run_tab, viewblock, wait_note  # noqa: E402
from explorer.ui.page.evaluations import build_evaluations_tab  # noqa: E402
from explorer.ui.runs import gallery, questions  # noqa: E402
from explorer.ui.runs.controller import RunController, RuntimeHolder, given_name  # noqa: E402
from explorer.ui.runs.history import Exports, TraceCache  # noqa: E402
from explorer.ui.serving.admission import EVENT_LIMIT, RunGate  # noqa: E402
from explorer.ui.serving.lesson import Lessons  # noqa: E402
from explorer.ui.views import terms  # noqa: E402
from explorer.ui.views.report import EXPLORER_JS, PLOTLY_JS  # noqa: E402

log = logging.getLogger("explorer.ui")

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
    #: Runs using the model at once, decoded as one batch (0: EXPLORER_CONCURRENT_RUNS, else the default).
    concurrent_runs: int = 0
    #: An OTLP/HTTP collector every finished run is streamed to as it is stored ('' for none).
    otlp: str = ""


PAGE_CSS = [ASSETS_DIR / "explorer.css", ASSETS_DIR / "page.css", ASSETS_DIR / "lesson.css"]
#: Following a presenter, and the presenter's side of it (:mod:`explorer.ui.serving.lesson`).
LESSON_JS = ASSETS_DIR / "lesson.js"


def head_html() -> str:
    """Scripts and styles every view needs, served by the app itself from the installed packages (no CDN).

    Gradio scopes the stylesheets it is given (:func:`css_paths`) to its own container. The views'
    stylesheet is also linked here, unscoped, for what sits on the page's body (the fork menu,
    presenting mode's step bar); inside the container the scoped copy wins. page.css holds the
    rules that match the body itself (presenting mode is a class of the body)."""
    gr.set_static_paths([PLOTLY_JS, EXPLORER_JS, LESSON_JS, *PAGE_CSS])
    return (f'<script src="gradio_api/file={PLOTLY_JS}"></script>'
            f'<script src="gradio_api/file={EXPLORER_JS}"></script>'
            f'<script src="gradio_api/file={LESSON_JS}"></script>'
            + "".join(f'<link rel="stylesheet" href="gradio_api/file={css}">' for css in PAGE_CSS))


def css_paths() -> list[Path]:
    """The views' look and the app's layout around them (Gradio scopes these to its container)."""
    return [ASSETS_DIR / "explorer.css", ASSETS_DIR / "app.css"]


def theme() -> Any:
    """Gradio's default theme with help and placeholder text dark enough to read (WCAG AA: 4.5:1)."""
    return gr.themes.Default().set(
        body_text_color_subdued="*neutral_600", block_info_text_color="*neutral_600",
        input_placeholder_color="*neutral_500", block_label_text_color="*neutral_700",
        checkbox_label_text_color="*neutral_800",
        # white on the default orange and red buttons reads at 2.8:1 and 3.8:1; the darker shades at 5:1 and more
        button_primary_background_fill="*primary_700", button_primary_background_fill_hover="*primary_800",
        button_cancel_background_fill="#b91c1c", button_cancel_background_fill_hover="#991b1b")


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


def _reopener(corpus: str, attn: str):
    """A recorded run's model opened beside the app's when it is an embedded model already fetched (so a
    case study recorded on Gemma-3-270M forks on a SmolLM2 app); the same runtime for every other model.
    Opening it takes a while the first time: ``progress`` hears its name, then the loader's steps."""
    def reopen(runtime: Any, recorded: dict[str, Any], progress: Any = None) -> Any:
        from explorer.engine.embedded import embedded_spec, is_fetched
        from explorer.runtime import engine_loaded, open_engine, runtime_for

        have = runtime.engine.fingerprint()
        source = str(recorded.get("source") or "")
        if not source or (source == have.get("source") and recorded.get("name") == have.get("name")):
            return runtime
        model = embedded_spec(source)
        if model is None or not is_fetched(model):
            return runtime  # the fork's check refuses it and names the model to load
        dtype, device = str(recorded.get("dtype") or "float32"), str(have.get("device") or "cpu")
        if progress is not None and not engine_loaded(source, dtype=dtype, device=device, attn=attn):
            progress(str(recorded.get("name") or model.name))
        engine = open_engine(source, dtype=dtype, device=device, attn=attn, progress=progress)
        current = runtime.corpus.get("retriever_config") or {"kind": runtime.corpus.get("retriever", "bm25")}
        return runtime_for(engine, corpus, retriever=current.get("kind") or "bm25",
                           embedder=current.get("embedder") or None)

    return reopen


def _runtime_holder(settings: AppSettings, start: Any, opening: str | None, gate: RunGate) -> RuntimeHolder:
    """The model and index, loaded in the background from server start, then warmed up on the opening question."""
    from explorer.runtime import open_runtime

    def open_app_runtime() -> Any:
        from explorer.engine.prefix_cache import PrefixCache
        from explorer.engine.random_models import is_random_spec

        if is_random_spec(settings.model):  # random:tiny: the form and the page without a model's wait
            from explorer.engine.generation import Engine
            from explorer.engine.random_models import load_random_model
            from explorer.runtime import runtime_for

            runtime = runtime_for(Engine(load_random_model(settings.model)), settings.corpus, retriever=start,
                                  progress=holder.note)
        else:
            runtime = open_runtime(settings.model, settings.corpus, retriever=start, attn=settings.attn,
                                   progress=holder.note)
        # The methods' prompts open with the same instruction and exemplars: encode those once.
        if settings.prefix_cache:
            runtime.engine.prefix_cache = PrefixCache()
        if gate.capacity > 1:  # concurrent visitors' runs share the model's decode steps
            from explorer.engine.batching import enable

            enable(runtime.engine)
        return runtime

    holder = RuntimeHolder(open_app_runtime,
                           describe=f"model {given_name(settings.model)}, corpus {given_name(settings.corpus)}, "
                                    f"retriever {start.label}",
                           warm=warm_up(opening) if opening is not None else None)
    if settings.preload:
        holder.start()
    return holder


def _evaluations_tab(store: RunStore, cache: TraceCache, head: str) -> None:
    """Stored evaluations: pick one, a cell of its tables, then a question; its run opens below."""
    with gr.Tab("Evaluations", id="evaluations", elem_id="tab-evaluations"):
        evaluations = build_evaluations_tab(store)
        eval_view = viewblock.build("evaluations", cache, head, '<p class="dre-empty">Pick an evaluation, '
                                    "a cell of its table, then a question: its run opens here.</p>")
        evaluations.run_id.change(
            lambda run_id, signal: viewblock.after_show(cache, viewblock.Shown([run_id] if run_id else []), signal),
            [evaluations.run_id, eval_view.signal], [eval_view.html, eval_view.state, eval_view.run, eval_view.theta],
            api_visibility="private", show_progress="hidden")


def _model_status_poll(holder: RuntimeHolder, model_status: Any) -> None:
    """Refresh the loading line every second until the model is ready (or failed)."""
    timer = gr.Timer(1.0, active=not holder.ready)

    def poll() -> tuple[str, Any]:
        return run_tab.note_html(holder.status()), gr.Timer(active=holder.state not in ("ready", "failed"))

    timer.tick(poll, None, [model_status, timer], api_visibility="private", queue=False, show_progress="hidden")


def build_app(settings: AppSettings) -> gr.Blocks:
    """The whole page: the Run tab, History, Evaluations, help, and the scripting API."""
    from explorer.retrieval.choice import retriever_config

    store = RunStore(settings.db)
    if settings.otlp:
        from explorer.otel_live import LiveExport

        LiveExport(settings.otlp).attach(store)
        log.info("finished runs are streamed to %s", settings.otlp)
    start_choice = retriever_config(settings.retriever, settings.embedder or None)  # a bad option fails at start
    shelf = gallery.load()
    if shelf.problem:
        log.warning("%s", shelf.problem)
    opening = questions.find(questions.CASES, f"demo:{shelf.first.question_id}") if shelf.first else None
    gate = RunGate(settings.concurrent_runs or None)
    holder = _runtime_holder(settings, start_choice, opening.question if opening is not None else None, gate)
    model_name = controls.model_name(settings.model)
    controller = RunController(store, holder, retarget=_retargeter(settings.corpus), gate=gate,
                               reopen=_reopener(settings.corpus, settings.attn), model=model_name)
    cache = TraceCache(store)
    head = head_html()

    # Files handed to the browser (exports) are copied into Gradio's cache: deleted after an hour.
    with gr.Blocks(title="Dynamic RAG Explorer", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
        with gr.Row(elem_id="app-top", equal_height=True):
            gr.HTML('<h1 class="dre-apphead">Dynamic RAG Explorer <span>· why a model retrieves when it does'
                    "</span></h1>", elem_id="app-title", js_on_load=None, scale=2)
            model_status = gr.HTML(run_tab.note_html(holder.status()), elem_id="model-status", js_on_load=None,
                                   scale=3)
            present = gr.Button("Present", size="sm", elem_id="present-toggle", scale=0, min_width=90)
        present.click(None, None, None, js="() => { window.DRE && window.DRE.present && window.DRE.present(true); }",
                      api_visibility="private")
        with gr.Tabs(elem_id="tabs"):
            exports = Exports()
            tab = run_tab.build(settings, controller, cache, shelf, start_choice, method_names(), model_name, head,
                                exports)
            history_tab.build(store, cache, exports, head, forker=forkblock.Forker(controller),
                              recorded=[(i.label, t) for i in shelf.items if (t := shelf.trace(i.key)) is not None])
            _evaluations_tab(store, cache, head)
            with gr.Tab("How to read", id="help", elem_id="tab-help"):
                back = gr.Button("← Back to the run", size="sm", elem_id="help-back")
                gr.Markdown(terms.help_markdown(HELP.read_text(encoding="utf-8")), elem_id="help-text")
            back.click(None, None, None, js="() => { window.DRE && window.DRE.backFromHelp(); }",
                       api_visibility="private")
        api.register(controller, store, model_name, cache=cache)
        _model_status_poll(holder, model_status)
        handler, inputs, outputs = tab.on_load  # ?run=ID, ?compare=A,B, ?case=NAME open directly
        demo.load(handler, inputs, outputs, queue=False, api_visibility="private", show_progress="hidden")
        if tab.wait is not None:  # the wait before a live run, from the lengths measured by the time the page opens
            demo.load(lambda: wait_note.wait_html(controller, shelf, ["dragin"]), None, tab.wait, queue=False,
                      api_visibility="private", show_progress="hidden")
    # The lessons' routes are added to the web server by launch() (they are not Gradio events).
    demo.explorer_lessons = Lessons(known=_known_run(cache))  # type: ignore[attr-defined]
    return demo


def _known_run(cache: TraceCache) -> Any:
    """Whether a run id names a run the page can open (stored, or recorded in the shipped gallery)."""
    def known(run_id: str) -> bool:
        try:
            cache.get(run_id)
            return True
        except ExplorerError:
            return False

    return known


def launch(demo: gr.Blocks, *, host: str, port: int, auth: tuple[str, str] | None = None,
           quiet: bool = False, uploads: bool | None = None, proxies: tuple[Any, ...] = ()) -> None:
    """Serve with a bounded queue and nothing fetched from outside (no analytics, no CDN, no SSR).

    The :mod:`~explorer.ui.serving.guard` middleware sits in front: no API schema routes, uploads only
    when a component takes files (``uploads=None`` decides from the layout), a backoff on
    repeated wrong passwords, and forwarding headers believed only from ``proxies``. The lessons'
    routes (:mod:`~explorer.ui.serving.lesson`) are served beside Gradio's, behind the same guard.
    """
    from starlette.middleware import Middleware

    from explorer.ui.api.call_defaults import api_defaults, api_names
    from explorer.ui.serving.forwarding import ForwardedTrust
    from explorer.ui.serving.guard import Guard, GuardSettings, needs_uploads, upload_suffixes
    from explorer.ui.serving.lesson import routes as lesson_routes
    from explorer.ui.serving.uploads import MAX_UPLOAD_BYTES

    allow = needs_uploads(demo) if uploads is None else uploads
    lessons = getattr(demo, "explorer_lessons", None)
    guard = Middleware(Guard, settings=GuardSettings(uploads=allow, login=auth is not None,
                                                     upload_suffixes=upload_suffixes(demo),
                                                     forwarded=ForwardedTrust(tuple(proxies)),
                                                     api_defaults=api_defaults(demo), api_names=api_names(demo)))
    os.environ["FORWARDED_ALLOW_IPS"] = ""  # uvicorn believes no forwarding header; the guard decides
    # The model's events wait in the app's own line (explorer.ui.serving.admission), so Gradio's queue holds them all.
    demo.queue(default_concurrency_limit=4, max_size=EVENT_LIMIT + 64).launch(
        max_threads=EVENT_LIMIT + 40,
        server_name=host, server_port=port, auth=auth, show_error=False, quiet=quiet, ssr_mode=False,
        footer_links=["api"], pwa=False, mcp_server=False, css_paths=css_paths(), theme=theme(),
        allowed_paths=[], run_history=False, max_file_size=MAX_UPLOAD_BYTES if allow else None,
        app_kwargs={"docs_url": None, "redoc_url": None, "openapi_url": None, "middleware": [guard],
                    "routes": lesson_routes(lessons) if lessons is not None else []})
