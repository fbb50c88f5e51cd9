"""Recorded runs shipped with the app: the four papers' case studies, shown before anything runs.

A visitor of a demo gives a tool about a minute; a CPU run takes 10 to 30 s. So the app ships
a small gallery of runs recorded with the embedded models (Gradio's cached examples, done with
our own traces): one trace file per (case study, method) in ``assets/gallery/``, plus an index.
Opening one renders its trace through the same view as a live or reopened run, without calling
the model. Each run is recorded on whichever of the two embedded models shows its paper's
mechanism better (:data:`MODELS`; the caption says which, :mod:`explorer.ui.views.case_stories`), and
DR-RAG's run is shown beside the one-shot retrieval run its paper contrasts it with (:data:`BESIDE`).

``python -m explorer.ui.runs.gallery`` records them again (``--if-stale``: only when the shipped
traces are of another trace version than this explorer writes, or missing); ``make run`` does
that before starting the app, so a change of the trace format re-records the gallery.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.paths import ASSETS_DIR
from explorer.trace import TRACE_VERSION, Trace

GALLERY_DIR = ASSETS_DIR / "gallery"
INDEX = "index.json"

#: (case study, method) pairs worth showing: the methods that make each paper's case interesting.
ITEMS: tuple[tuple[str, str], ...] = (
    ("dragin", "wo"), ("dragin", "sr"), ("dragin", "flare"), ("dragin", "dragin"),
    ("seakr", "seakr"), ("blendfilter", "blendfilter"), ("drrag", "sr"), ("drrag", "drrag"),
    ("dragin", "etc"), ("dragin", "targ"), ("dragin", "probing_rag"),
)
#: The embedded model each item is recorded on (``embedded`` = SmolLM2-135M-Instruct when not listed):
#: the one of the two whose run shows the paper's mechanism better, compared on both (README,
#: "Recorded runs"). Never chosen for a right answer alone: the captions say where it is wrong.
MODELS: dict[str, str] = {
    "dragin-wo": "gemma3-270m",  # invents a capacity, as the paper's initial output does
    "dragin-sr": "gemma3-270m",
    "dragin-dragin": "gemma3-270m",  # RIND fires inside the invented number; SmolLM2 fires on " Maine"
    "seakr-seakr": "gemma3-270m",  # U over δ for a false pseudo-generation; SmolLM2 is over δ at every step
    "blendfilter-blendfilter": "gemma3-270m",  # SmolLM2's external augmentation comes back empty
    "dragin-etc": "gemma3-270m",  # the model of DRAGIN's run, so the two decisions compare
    "dragin-targ": "gemma3-270m",
    "dragin-probing_rag": "gemma3-270m",  # with its own prober (explorer/data/probers/gemma-3-270m-h640-l18)
}
#: A run shown beside an item when it opens: the contrast its paper draws (DR-RAG against one-shot retrieval).
BESIDE: dict[str, str] = {"drrag-drrag": "drrag-sr", "dragin-etc": "dragin-dragin", "dragin-targ": "dragin-dragin",
                          "dragin-probing_rag": "dragin-dragin"}
#: Which paper each case study comes from, as the gallery titles it.
CASE_TITLES = {"dragin": "DRAGIN", "seakr": "SEAKR", "blendfilter": "BlendFilter", "drrag": "DR-RAG"}
#: The item the app opens with (the DRAGIN case study, DRAGIN's run).
FIRST = ("dragin", "dragin")


@dataclass(frozen=True)
class Item:
    """One recorded run as the index lists it."""

    case: str
    method: str
    question_id: str
    question: str
    file: str
    run_id: str
    answer: str
    retrievals: int
    #: The model it was recorded on, as its trace names it.
    model: str = ""
    #: Key of the item shown beside it (its paper's contrast), or "".
    beside: str = ""

    @property
    def key(self) -> str:
        return f"{self.case}-{self.method}"

    @property
    def label(self) -> str:
        return f"{CASE_TITLES.get(self.case, self.case)} case · {self.method}"


@dataclass
class Gallery:
    """The shipped recorded runs, loaded once; ``problem`` says why there are none to show."""

    items: list[Item]
    traces: dict[str, Trace]
    problem: str = ""

    def trace(self, key: str) -> Trace | None:
        return self.traces.get(key)

    def item(self, key: str) -> Item | None:
        return next((i for i in self.items if i.key == key), None)

    def shown_with(self, item: Item) -> list[Item]:
        """The items a view opens for ``item``: its contrast first when it has one, then itself."""
        beside = self.item(item.beside) if item.beside else None
        return [beside, item] if beside is not None else [item]

    @property
    def first(self) -> Item | None:
        return self.item("-".join(FIRST)) or (self.items[0] if self.items else None)


def file_name(case: str, method: str) -> str:
    return f"{case}-{method}.json"


def model_of(case: str, method: str) -> str:
    """The embedded model an item is recorded on (its ``--model`` spec)."""
    return MODELS.get(f"{case}-{method}", "embedded")


def live_settings(trace: Trace, model: str) -> dict[str, Any]:
    """The settings "Run it live" puts into the controls: the recorded run's own, except the values a
    preset of the recording's model chose when ``model`` (the app's, by display name) is another:
    those go to what that model resolves, since thresholds do not transfer across models."""
    if str((trace.model or {}).get("name", "")) == model:
        return dict(trace.config)
    from explorer.methods.resolve import resolve_config

    own = resolve_config(trace.method, trace.variant, model, {}).config
    return {name: getattr(own, name) if trace.config_sources.get(name) == "preset" else value
            for name, value in trace.config.items()}


def read_index(folder: Path = GALLERY_DIR) -> dict[str, Any]:
    path = folder / INDEX
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    return json.loads(path.read_text(encoding="utf-8"))


def load(folder: Path = GALLERY_DIR) -> Gallery:
    """Read and validate the shipped gallery; a stale or broken one is reported, never half shown."""
    fix = "run `python -m explorer.ui.runs.gallery` (or `make run`) to record it again"
    try:
        index = read_index(folder)
    except (OSError, ValueError) as exc:
        return Gallery([], {}, f"no recorded runs to show ({exc}); {fix}")
    if index.get("trace_version") != TRACE_VERSION:
        return Gallery([], {}, f"the recorded runs are of trace version {index.get('trace_version')!r}, this "
                               f"explorer reads version {TRACE_VERSION}; {fix}")
    items: list[Item] = []
    traces: dict[str, Trace] = {}
    for row in index.get("items") or []:
        try:
            item = Item(**row)
            trace = Trace.from_json((folder / item.file).read_text(encoding="utf-8"))
            trace.validate()
        except (OSError, TypeError, ValueError, KeyError) as exc:
            return Gallery([], {}, f"recorded run {row.get('file', '?')} cannot be read ({exc}); {fix}")
        items.append(item)
        traces[item.key] = trace
    return Gallery(items, traces)


def is_stale(folder: Path = GALLERY_DIR) -> str:
    """Why the gallery must be recorded again ("" when it is current)."""
    return load(folder).problem


def _cases() -> dict[str, Any]:
    from explorer.eval.datasets import load_dataset

    cases = {q.extra.get("case_study"): q for q in load_dataset("demo") if q.extra.get("case_study")}
    missing = sorted({case for case, _ in ITEMS} - set(cases))
    if missing:
        raise SystemExit(f"the demo questions have no case study {', '.join(missing)}")
    return cases


def write_index(folder: Path = GALLERY_DIR) -> list[Item]:
    """The index over the trace files present, in :data:`ITEMS` order; other files are removed."""
    cases = _cases()
    items = []
    for case, method in ITEMS:
        path = folder / file_name(case, method)
        if not path.is_file():
            continue
        trace = Trace.from_json(path.read_text(encoding="utf-8"))
        trace.validate()
        q = cases[case]
        key = f"{case}-{method}"
        beside = BESIDE.get(key, "")
        items.append(Item(case=case, method=method, question_id=q.id, question=q.question, file=path.name,
                          run_id=trace.run_id, answer=str(trace.answer or ""), retrievals=trace.costs.retrievals,
                          model=str(trace.model.get("name", "")),
                          beside=beside if beside and (folder / f"{beside}.json").is_file() else ""))
    models = sorted({item.model for item in items})
    index = {"trace_version": TRACE_VERSION, "models": models, "corpus": "demo",
             "items": [item.__dict__ for item in items]}
    (folder / INDEX).write_text(json.dumps(index, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for old in folder.glob("*.json"):
        if old.name != INDEX and old.name not in {i.file for i in items}:
            old.unlink()
    return items


def record(folder: Path = GALLERY_DIR, *, corpus: str = "demo", progress: Any = print,
           only: set[str] | None = None) -> list[Item]:
    """Run the gallery items (``only``: those keys, e.g. ``seakr-seakr``), each on its embedded model
    (:data:`MODELS`), write each trace, then the index over every trace present."""
    from explorer.methods.base import run_question
    from explorer.runtime import open_runtime

    cases = _cases()
    wanted = [(c, m) for c, m in ITEMS if not only or f"{c}-{m}" in only]
    if only and len(wanted) != len(only):
        known = ", ".join(f"{c}-{m}" for c, m in ITEMS)
        raise SystemExit(f"unknown gallery item(s) in {', '.join(sorted(only))}; known: {known}")
    folder.mkdir(parents=True, exist_ok=True)
    if not only:  # a full recording replaces whatever was there
        for old in folder.glob("*.json"):
            old.unlink()
    for model in dict.fromkeys(model_of(c, m) for c, m in wanted):  # one model loaded at a time
        runtime = open_runtime(model, corpus, progress=progress)
        for case, method in (pair for pair in wanted if model_of(*pair) == model):
            q = cases[case]
            progress(f"recording {method} on the {case} case study with {model} …")
            trace = run_question(method, q.question, runtime, gold=q.gold())
            if trace.status != "complete":
                raise SystemExit(f"{method} on {q.id} ended {trace.status}: {trace.error}")
            trace.validate()
            (folder / file_name(case, method)).write_text(trace.to_json() + "\n", encoding="utf-8")
        del runtime
    return write_index(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer.ui.runs.gallery",
                                     description="Record the app's gallery of case-study runs (the embedded models).")
    parser.add_argument("--if-stale", action="store_true",
                        help="record only when the shipped traces are missing or of another trace version")
    parser.add_argument("--folder", type=Path, default=GALLERY_DIR, help="where to write (default assets/gallery)")
    parser.add_argument("--only", nargs="+", metavar="CASE-METHOD",
                        help="record just these items (e.g. seakr-seakr), keeping the others")
    args = parser.parse_args(argv)
    if args.if_stale:
        why = is_stale(args.folder)
        if not why:
            print("the recorded gallery is current", flush=True)
            return 0
        print(f"recording the gallery again: {why}", flush=True)
    items = record(args.folder, progress=lambda m: print(m, flush=True), only=set(args.only or ()) or None)
    size = sum((args.folder / i.file).stat().st_size for i in items)
    print(f"{len(items)} runs recorded in {args.folder} ({size / 1024:.0f} KiB)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
