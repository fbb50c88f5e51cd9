"""Running methods over benchmark questions into one named, resumable evaluation in the run store.

An evaluation is a name in the store's ``evaluations`` table plus the runs stored under it. Each
run is an ordinary trace (the same one ``explorer run`` and the app produce, from
:func:`~explorer.methods.base.run_question`), with ``trace.gold`` holding what scoring and the
explorer need about the question::

    {"dataset": "hotpotqa", "id": "5a8b57f2...", "type": "bridge",
     "answers": ["main answer", "alias", ...], "gold_passages": ["<benchmark corpus passage id>", ...]}

so a single case opened from an evaluation shows its gold passages, and metrics are computed from
stored traces alone (:mod:`explorer.eval.scores`).

What makes long evaluations safe on a shared machine:

- the model and the index are opened once; questions go through one at a time, or, with
  ``cluster=`` (``--workers``/``--ray-address``), on Ray workers that each open the same runtime
  once (:mod:`explorer.eval.cluster`) while this process stays the store's only writer;
- finished runs are written in batches, each batch one transaction, and at the end; an interrupt
  (Ctrl-C or any exception) writes the finished runs still pending and marks the evaluation
  ``interrupted``; a process killed outright loses at most the runs of one unwritten batch;
- a rerun under the same name skips every (dataset, question, method, variant, config) already
  stored as complete, so it resumes, and it may add methods or questions; a question source the
  evaluation does not have is refused unless it is given to be added (``--add-dataset``), since the
  sources are part of what an evaluation is;
- each run is seeded from the evaluation seed and the run's own key, so a run's result does not
  depend on which runs came before it: a resumed evaluation equals an uninterrupted one;
- each dataset is recorded with its file, format and a content fingerprint, and a resume that
  would read other questions under the same name (another file, an edited file, another format,
  a missing ``--data``) is refused instead of mixing two question sets in one table;
- one live process per evaluation name (:mod:`explorer.eval.lock`): a second is refused with
  the holder's pid; the lock of a crashed process is detected and cleared.

Configs: an arm keeps the values the user set; everything else comes from the method's defaults
and the model's preset (:mod:`explorer.methods.presets`), exactly as ``run_question`` resolves
them, so an evaluation runs what ``explorer run`` would. The resolved config of every arm is
stored with the evaluation; a resume whose defaults or presets have changed since is refused
with the difference, instead of mixing two configs under one method.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from explorer.errors import ConfigError, ExplorerError
from explorer.eval.datasets import Question, resolve_sources
from explorer.eval.execution import Executor, InProcess, Task, timestamp
from explorer.eval.lock import EvaluationLock
from explorer.eval.runtime_spec import runtime_spec
from explorer.methods.base import get_method
from explorer.methods.resolve import resolve_config
from explorer.runtime import Runtime
from explorer.trace import Trace

if TYPE_CHECKING:
    from explorer.eval.cluster import ClusterOptions

RESERVED_FIELDS = ("seed",)


@dataclass(frozen=True)
class Arm:
    """One configured method of an evaluation: method, variant and the config values the user set."""

    method: str
    variant: str
    given: dict[str, Any]

    def __hash__(self) -> int:
        return hash((self.method, self.variant, json.dumps(self.given, sort_keys=True)))

    @property
    def name(self) -> str:
        return self.method if self.variant == get_method(self.method).variants[0] else f"{self.method}:{self.variant}"

    def resolve(self, model_name: str) -> dict[str, Any]:
        """The full config a run of this arm records on ``model_name`` (:func:`resolve_config`, as every run)."""
        return resolve_config(self.method, self.variant, model_name, self.given).config.to_dict()


def config_key(config: dict[str, Any]) -> str:
    """A config as the store keeps it (sorted-key JSON), which is how resumes recognise a run."""
    return json.dumps(config, sort_keys=True)


@dataclass
class EvalSettings:
    """Everything that defines an evaluation's runs; stored with it and checked when it is resumed."""

    name: str
    datasets: list[str]  # benchmark names, question files, or NAME=PATH (explorer.eval.datasets.resolve_source)
    arms: list[Arm]
    limit: int | None = None
    model: str = "embedded"
    corpus: str = "benchmark"
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    data_dir: str | None = None
    sweep: dict[str, Any] | None = None
    batch_size: int = 8
    dataset_format: str | None = None  # the format of every dataset given as a file (None: detected)
    #: RetrieverConfig.recorded() of the retriever (None: BM25); part of the identity, so one
    #: evaluation never mixes retrievers and two evaluations can be compared across them.
    retriever: dict[str, Any] | None = None
    #: Question sources this run may add to a stored evaluation (``--add-dataset``). An evaluation's
    #: sources are part of what it is: a source under ``datasets`` that a stored evaluation does not
    #: have is refused, so another file never joins a table by a slip of the command line.
    add_datasets: list[str] = field(default_factory=list)

    @property
    def retriever_config(self) -> dict[str, Any]:
        return dict(self.retriever or {"kind": "bm25"})
    #: Attention backend (``--attn``); not part of the identity: backends agree to float rounding.
    attn: str = "auto"
    #: Questions decoded at once in one batch (``--batch``); not part of the identity: a batched run
    #: is the run made alone (tokens and decisions identical, signals to float rounding).
    concurrency: int = 1

    def identity(self) -> dict[str, Any]:
        """What must not change between a run and its resume (runs made otherwise would not be comparable)."""
        return {"model": self.model, "corpus": self.corpus, "dtype": self.dtype, "device": self.device,
                "seed": self.seed, "retriever": self.retriever_config}

    def to_dict(self) -> dict[str, Any]:
        return {**self.identity(), "datasets": {d: {"limit": self.limit} for d in [*self.datasets,
                                                                                 *self.add_datasets]},
                "arms": [{"method": a.method, "variant": a.variant, "set": a.given} for a in self.arms],
                "sweep": self.sweep, "data_dir": self.data_dir, "dataset_format": self.dataset_format,
                "attn": self.attn}


# --- parsing what users type ----------------------------------------------------------------------


def parse_list(text: str | Iterable[str], what: str) -> list[str]:
    """The comma-separated items of an option (repeatable), in order, each once.

    An empty item (``0.1,,0.2``, a trailing comma) is refused with its place rather than dropped: it
    is usually a value the user meant to type."""
    given = [text] if isinstance(text, str) else list(text)
    if not any(t.strip() for t in given):
        raise ConfigError(f"no {what} given", where=f"--{what}", fix=f"give one or more {what}, comma separated")
    out: list[str] = []
    for part in given:
        items = part.split(",")
        for number, item in enumerate(items, start=1):
            if not item.strip():
                raise ConfigError(f"item {number} of {len(items)} in {part!r} is empty", where=f"--{what}",
                                  fix=f"give a value between each pair of commas (or drop the extra comma), e.g. "
                                      f"{','.join(i.strip() for i in items if i.strip())}")
            out.append(item.strip())
    return list(dict.fromkeys(out))


def build_arms(methods: Iterable[str], *, settings: Iterable[str] = (), variants: Iterable[str] = (),
               seed: int = 0) -> list[Arm]:
    """Arms from ``--methods wo,dragin[:reference]``, ``--set [method.]param=value`` and ``--variant method=v``.

    ``--set param=value`` without a method applies to every listed method whose config has that
    field (and is an error when none has it), which is how one caps generation length everywhere.
    A method whose config has a ``seed`` field gets the evaluation seed unless it is set.
    """
    entries: list[tuple[str, str | None]] = []
    for item in methods:
        method, _, variant = item.partition(":")
        entries.append((method.strip(), variant.strip() or None))
    known = {m for m, _ in entries}
    for m in known:
        get_method(m)  # unknown method: clear error before anything loads
    chosen_variant: dict[str, str] = {}
    for item in variants:
        method, sep, variant = item.partition("=")
        if not sep or not variant.strip():
            raise ConfigError(f"{item!r} is not of the form method=variant", where="--variant",
                              fix="write e.g. --variant dragin=reference")
        if method.strip() not in known:
            raise ConfigError(f"--variant names {method.strip()!r}, which is not among the methods",
                              where="--variant", fix=f"use one of {', '.join(sorted(known))}")
        chosen_variant[method.strip()] = variant.strip()
    per_method: dict[str, dict[str, str]] = {m: {} for m in known}
    for item in settings:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"{item!r} is not of the form [method.]name=value", where="--set",
                              fix="write e.g. --set dragin.threshold=0.5 or --set max_length=32")
        target, dot, param = name.strip().rpartition(".")
        if dot:
            if target not in known:
                raise ConfigError(f"--set names method {target!r}, which is not among the methods", where="--set",
                                  fix=f"use one of {', '.join(sorted(known))}")
            per_method[target][param] = value
            continue
        takers = [m for m in known if param in _field_names(m)]
        if not takers:
            raise ConfigError(f"no listed method has a parameter {param!r}", where="--set",
                              fix="see `python -m explorer methods METHOD` for each method's parameters")
        for m in takers:
            per_method[m].setdefault(param, value)
    arms: list[Arm] = []
    for method, variant in entries:
        values: dict[str, Any] = dict(per_method[method])
        if "seed" in _field_names(method) and "seed" not in values:
            values["seed"] = seed
        cls = get_method(method)
        variant = variant or chosen_variant.get(method) or cls.variants[0]
        if variant not in cls.variants:
            raise ConfigError(f"method {method} has no variant {variant!r}", where="--variant",
                              fix=f"choose one of {', '.join(cls.variants)}")
        cfg = resolve_config(method, variant, None, values).config.to_dict()  # a bad value fails here, early
        given = {k: cfg[k] for k in values}  # typed ("0.5" -> 0.5)
        arm = Arm(method, variant, given)
        if arm not in arms:
            arms.append(arm)
    return arms


def _field_names(method: str) -> set[str]:
    from dataclasses import fields

    return {f.name for f in fields(get_method(method).Config)}


def default_name(datasets: list[str], limit: int | None, model: str, corpus: str, *, retriever: Any = None) -> str:
    """A name that is the same for the same question set, so a plain rerun resumes (methods can be added).

    A retriever other than BM25 adds its label (``dense(all-MiniLM-L6-v2)``), so the same command
    with another ``--retriever`` starts its own evaluation instead of being refused."""
    model_part = model if "/" not in model else model.rstrip("/").rsplit("/", 1)[-1]
    name = f"{'+'.join(datasets)}-{'all' if limit is None else limit}-{model_part}-{corpus}"
    label = getattr(retriever, "label", "bm25")
    return name if label == "bm25" else f"{name}-{label}"


# --- resuming -------------------------------------------------------------------------------------


def _check_identity(stored: dict[str, Any], settings: EvalSettings) -> None:
    stored = {"retriever": {"kind": "bm25"}, **stored}  # evaluations stored before retrievers were chosen used BM25
    for key, value in settings.identity().items():
        if key in stored and stored[key] != value:
            raise ExplorerError(f"evaluation {settings.name!r} was run with {key}={stored[key]!r}, "
                                f"this run asks for {key}={value!r}",
                                fix="use the settings the evaluation was started with, or a new --name")


def _check_sources(stored: dict[str, Any], settings: EvalSettings, described: dict[str, dict[str, Any]]) -> None:
    """Refuse a resume that would read other questions under a dataset name the evaluation already has."""
    from explorer.eval.question_formats import FORMAT_TITLES
    from explorer.options import option, usage

    for label, now in described.items():
        before = (stored.get("datasets") or {}).get(label) or {}
        if not before.get("fingerprint") or before["fingerprint"] == now["fingerprint"]:
            continue  # same questions (or an evaluation from before fingerprints were kept)
        old_format, new_format = (FORMAT_TITLES.get(x.get("format"), x.get("format")) for x in (before, now))
        if before.get("file") == now["file"] and before.get("format") == now["format"]:
            change = f"{now['file']} has changed since the evaluation began"
        elif before.get("file") == now["file"]:
            change = f"it read {now['file']} as {old_format}, this run reads it as {new_format}"
        else:
            change = f"it read {before.get('file')} ({old_format}), this run reads {now['file']} ({new_format})"
        fixes = []
        same = usage("dataset", f"{label}={before.get('file')}")
        if same and before.get("file") != now["file"]:
            fixes.append(f"rerun with the same questions: {same}")
        elif before.get("file") == now["file"] and before.get("format") != now["format"] and option("dataset_format"):
            fixes.append(f"rerun with {option('dataset_format')} {before.get('format')}")
        fixes.append(f"start a new evaluation with {usage('name', 'NEW_NAME') or 'another name'}")
        raise ExplorerError(f"evaluation {settings.name!r} holds other {label!r} questions: {change}",
                            fix="; or ".join(fixes))


def _check_new_sources(stored: dict[str, Any], settings: EvalSettings, sources: list[Any], added: set[str]) -> None:
    """Refuse a question source the stored evaluation does not have unless it was given to be added.

    An evaluation's sources are part of its identity: its tables compare methods on those
    questions, so a file joins it only when the user says so (``--add-dataset``)."""
    from explorer.options import usage

    held = stored.get("datasets") or {}
    if not held:
        return
    new = [s for s in sources if s.label not in held and s.label not in added]
    if not new:
        return
    has = "; ".join(f"{label} ({Path(str((info or {}).get('file') or label)).name})" for label, info in held.items())
    names = ", ".join(f"{s.label} ({s.path.name})" for s in new)
    specs = ",".join(s.spec for s in new)
    one = len(new) == 1
    fixes = []
    add = usage("add_dataset", specs)
    if add:
        fixes.append(f"add {'it' if one else 'them'} to this evaluation explicitly: {add} (in place of "
                     f"{usage('dataset', specs) or 'the dataset'})")
    new_name = usage("name", "NEW_NAME") or "another name"
    fixes.append(f"keep {'it' if one else 'them'} apart in a new evaluation: {new_name}")
    raise ExplorerError(f"evaluation {settings.name!r} holds the questions of {has}; {names} {'is' if one else 'are'} "
                        "not among its question sources, and an evaluation's sources are part of what it is",
                        fix="; or ".join(fixes))


def _merge(stored: dict[str, Any] | None, settings: EvalSettings, resolved: dict[Arm, dict[str, Any]],
           model_name: str, described: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The evaluation's settings after this run: old and new arms and datasets together.

    Refuses an arm whose resolved config differs from the one the evaluation already ran for the
    same method and variant (other than a sweep's parameter), naming each differing value.
    """
    new_arms = [{"method": a.method, "variant": a.variant, "set": a.given, "config": resolved[a]}
                for a in settings.arms]
    described = described or {}
    if stored is None:
        merged = settings.to_dict()
        merged.update(arms=new_arms, model_name=model_name)
        for d, info in described.items():
            merged["datasets"][d] = {**merged["datasets"].get(d, {}), **info}
        return merged
    swept = (stored.get("sweep") or {}).get("param")
    old_arms = list(stored.get("arms") or [])
    for arm in new_arms:
        for old in old_arms:
            if (old.get("method"), old.get("variant")) != (arm["method"], arm["variant"]):
                continue
            a = {k: v for k, v in arm["config"].items() if k != swept}
            b = {k: v for k, v in (old.get("config") or {}).items() if k != swept}
            if a != b:
                diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                shown = ", ".join(f"{k}: {b.get(k)!r} -> {a.get(k)!r}" for k in diff)
                keep = " ".join(f"--set {arm['method']}.{k}={b[k]}" for k in diff if k in b)
                raise ExplorerError(
                    f"evaluation {settings.name!r} ran {arm['method']} ({arm['variant']}) with another config "
                    f"({shown})", fix="use a new --name" + (f", or continue with the old values: {keep}" if keep
                                                             else ""))
    merged = dict(stored)
    merged.update(settings.identity())
    merged["model_name"] = model_name
    merged["arms"] = old_arms + [a for a in new_arms if a not in old_arms]
    datasets = dict(stored.get("datasets") or {})
    for d in settings.datasets:
        # What this command asks for, not the largest request so far: the status of an evaluation is whether
        # the runs it asks for now are stored (the report names the runs an earlier, larger request left).
        asked = int(described.get(d, {}).get("asked") or 0)
        datasets[d] = {**(datasets.get(d) or {}), **described.get(d, {}), "limit": settings.limit, "asked": asked}
    merged["datasets"] = datasets
    sweep = stored.get("sweep") or settings.sweep
    if stored.get("sweep") and settings.sweep and stored["sweep"].get("param") == settings.sweep.get("param"):
        values = list(stored["sweep"].get("values") or [])
        sweep = {**stored["sweep"], "values": values + [v for v in settings.sweep.get("values") or []
                                                        if v not in values]}
    merged["sweep"] = sweep
    merged.setdefault("data_dir", settings.data_dir)
    return merged


def run_seed(seed: int, dataset: str, question_id: str, arm: Arm) -> int:
    """A per-run seed from the evaluation seed and the run's key, independent of run order."""
    key = json.dumps([seed, dataset, question_id, arm.method, arm.variant, config_key(arm.given)])
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")


# --- running --------------------------------------------------------------------------------------


@dataclass
class EvalResult:
    """What one invocation did: runs made now, runs skipped as already stored, and its final status."""

    name: str
    ran: int = 0
    skipped: int = 0
    errors: int = 0
    status: str = "running"
    error_messages: list[str] = field(default_factory=list)


class _Tally:
    """Running per-arm EM/F1 (or accuracy) for the progress bar, from each run's own scores."""

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, float]] = {}

    def add(self, arm_name: str, trace: Trace) -> None:
        from explorer.eval.scores import score_trace

        s = score_trace(trace)
        t = self.sums.setdefault(arm_name, {"n": 0, "em": 0.0, "f1": 0.0, "nq": 0, "acc": 0.0, "na": 0})
        t["n"] += 1
        if s["em"] is not None:
            t["em"] += s["em"]
            t["f1"] += s["f1"]
            t["nq"] += 1
        if s["accuracy"] is not None:
            t["acc"] += s["accuracy"]
            t["na"] += 1

    def text(self) -> str:
        parts = []
        for name, t in self.sums.items():
            bits = []
            if t["nq"]:
                bits.append(f"EM {t['em'] / t['nq']:.2f} F1 {t['f1'] / t['nq']:.2f}")
            if t["na"]:
                bits.append(f"acc {t['acc'] / t['na']:.2f}")
            parts.append(f"{name} {' '.join(bits)}")
        return " | ".join(parts)


@dataclass
class _Plan:
    """What one invocation has to do: the questions, the arms' configs and the runs not yet stored."""

    questions: dict[str, list[Question]]
    stored_settings: dict[str, Any]
    names: dict[Arm, str]
    keys: dict[Arm, str]
    todo: list[tuple[Task, Arm]]
    total: int


def run_evaluation(settings: EvalSettings, store: Any, *, runtime: Runtime | None = None,
                   on_run: Callable[[Trace], None] | None = None, show_progress: bool = True,
                   progress: Callable[[str], None] | None = None,
                   cluster: ClusterOptions | None = None) -> EvalResult:
    """Run every arm on every question not yet stored as complete under ``settings.name``.

    ``runtime`` defaults to the runtime the settings describe (:func:`explorer.eval.runtime_spec.runtime_spec`,
    opened once, and only when something is left to run). With ``cluster`` enabled the runs go to
    Ray workers that each open that runtime themselves (:mod:`explorer.eval.cluster`); this process
    stays the only writer of the store either way. ``on_run`` is called after each run with its
    trace (after it is queued for writing); an exception from it interrupts the evaluation
    exactly as Ctrl-C does. While it runs, the evaluation's lock is held: another process asking
    for the same name is refused.
    """
    say = progress or (lambda m: print(m, file=sys.stderr, flush=True))
    if not settings.arms:
        raise ConfigError("no methods to run", where="--methods", fix="give one or more methods")
    if runtime is None:  # a method the model set-up cannot serve is refused before a model loads
        from explorer.methods.fit import check_before_loading

        check_before_loading([(a.method, a.variant) for a in settings.arms], settings.model, settings.attn)
    executor = _executor(settings, runtime, cluster, say)
    with EvaluationLock(store.path, settings.name) as lock:
        note = lock.stale_note()
        if note:
            say(note)
        try:
            return _run_evaluation(settings, store, executor, on_run=on_run, show_progress=show_progress)
        finally:
            executor.close()


def _executor(settings: EvalSettings, runtime: Runtime | None, cluster: ClusterOptions | None,
              say: Callable[[str], None]) -> Executor:
    spec = runtime_spec(settings)
    if cluster is None or not cluster.enabled:
        return InProcess(spec, runtime=runtime, progress=say, batch=max(1, settings.concurrency))
    if runtime is not None:
        raise ConfigError("a runtime object runs in this process only; Ray workers open theirs from the settings",
                          fix="leave out runtime= (or the cluster options)")
    from explorer.eval.cluster import RayPool

    return RayPool(spec, cluster, progress=say)


def _run_evaluation(settings: EvalSettings, store: Any, executor: Executor, *,
                    on_run: Callable[[Trace], None] | None, show_progress: bool) -> EvalResult:
    plan = _plan(settings, store, executor)
    result = EvalResult(name=settings.name, skipped=plan.total - len(plan.todo))
    tally = _Tally()
    if result.skipped:
        _tally_stored(store, settings, plan.questions, plan.names, plan.keys, tally)
    if not plan.todo:
        store.update_evaluation(settings.name, status="complete")
        result.status = "complete"
        return result
    _model_name(executor.model_name(), plan.stored_settings.get("model_name"), settings)
    _drive(settings, store, executor, plan, result, tally, on_run=on_run, show_progress=show_progress)
    return result


def _plan(settings: EvalSettings, store: Any, executor: Executor) -> _Plan:
    """Read the questions, check a resume against what is stored, store the merged settings, list the runs left."""
    sources = resolve_sources([*settings.datasets, *settings.add_datasets], fmt=settings.dataset_format,
                              data_dir=settings.data_dir)
    added = {s.label for s in resolve_sources(settings.add_datasets, fmt=settings.dataset_format,
                                              data_dir=settings.data_dir)} if settings.add_datasets else set()
    settings.datasets, settings.add_datasets = [s.label for s in sources], []
    questions: dict[str, list[Question]] = {s.label: s.load(settings.limit) for s in sources}
    described = {s.label: {**s.describe(), "asked": len(questions[s.label])} for s in sources}
    existing = store.evaluation(settings.name)
    stored = existing["settings"] if existing else None
    if stored is not None:
        _check_identity(stored, settings)
        _check_sources(stored, settings, described)
        _check_new_sources(stored, settings, sources, added)
    # Configs resolve against the model's name (its preset); a resume that has nothing left to do
    # takes the name from the stored settings and never loads the model.
    model_name = (stored or {}).get("model_name")
    if model_name is None or executor.loaded:
        model_name = _model_name(executor.model_name(), model_name, settings)
    resolved = {arm: arm.resolve(model_name) for arm in settings.arms}
    stored_settings = _merge(stored, settings, resolved, model_name, described)
    store.start_evaluation(settings.name, stored_settings)
    store.update_evaluation(settings.name, settings=stored_settings, status="running")
    store.discard_incomplete(settings.name)
    done = store.run_configs(settings.name)
    keys = {arm: config_key(resolved[arm]) for arm in settings.arms}
    # Question by question, alternating datasets, so a run stopped early has covered every dataset evenly.
    depth = max((len(qs) for qs in questions.values()), default=0)
    todo = [(d, questions[d][i], arm) for i in range(depth) for d in settings.datasets if i < len(questions[d])
            for arm in settings.arms
            if (d, questions[d][i].id, arm.method, arm.variant, keys[arm]) not in done]
    tasks = [(Task(index=n, dataset=d, question=q, method=arm.method, variant=arm.variant, given=dict(arm.given),
                   config=resolved[arm], seed=run_seed(settings.seed, d, q.id, arm)), arm)
             for n, (d, q, arm) in enumerate(todo)]
    names = {arm: arm.name if len({a.method for a in settings.arms}) == len(settings.arms) else _arm_label(arm)
             for arm in settings.arms}
    return _Plan(questions=questions, stored_settings=stored_settings, names=names, keys=keys, todo=tasks,
                 total=sum(len(qs) for qs in questions.values()) * len(settings.arms))


class _Batches:
    """Finished runs waiting to be written: one transaction per dataset per batch."""

    def __init__(self, store: Any, evaluation: str, size: int) -> None:
        self.store, self.evaluation, self.size = store, evaluation, size
        self.pending: list[tuple[str, str, Trace]] = []

    def add(self, dataset: str, question_id: str, trace: Trace) -> None:
        self.pending.append((dataset, question_id, trace))
        if len(self.pending) >= self.size:
            self.flush()

    def flush(self) -> None:
        for dataset in dict.fromkeys(d for d, _, _ in self.pending):
            batch = [(q, t) for d, q, t in self.pending if d == dataset]
            self.store.save_many([t for _, t in batch], evaluation=self.evaluation, dataset=dataset,
                                 question_ids=[q for q, _ in batch])
        self.pending.clear()


def _drive(settings: EvalSettings, store: Any, executor: Executor, plan: _Plan, result: EvalResult, tally: _Tally,
           *, on_run: Callable[[Trace], None] | None, show_progress: bool) -> None:
    """Hand the runs left to the executor and write what comes back; on any interrupt, write what came back."""
    from tqdm import tqdm

    record = _Execution(store, settings.name, plan.stored_settings, executor)
    batches = _Batches(store, settings.name, settings.batch_size)
    arms = {task.index: arm for task, arm in plan.todo}
    workers = record.entry.get("workers", 1)
    desc = settings.name + (f" ({workers} worker{'s' if workers != 1 else ''})" if record.entry["mode"] == "ray"
                            else "")
    bar = tqdm(total=plan.total, initial=result.skipped, unit="run", desc=desc, disable=not show_progress,
               dynamic_ncols=True, file=sys.stderr)
    if result.skipped:
        bar.set_postfix_str(tally.text(), refresh=False)
    runs = executor.runs([task for task, _ in plan.todo])
    try:
        for task, trace in runs:
            name = plan.names[arms[task.index]]
            if trace.status != "complete":
                result.errors += 1
                message = f"{task.dataset} {task.question.id} {name}: {trace.error}"
                result.error_messages.append(message)
                bar.write(f"run failed: {message}")
            batches.add(task.dataset, task.question.id, trace)
            result.ran += 1
            tally.add(name, trace)
            bar.set_postfix_str(tally.text(), refresh=False)
            bar.update(1)
            if on_run is not None:
                on_run(trace)
        batches.flush()
    except BaseException:
        runs.close()
        batches.flush()
        record.finish(result.ran, status="interrupted")
        result.status = "interrupted"
        bar.close()
        raise
    bar.close()
    record.finish(result.ran, status="complete")
    result.status = "complete"


class _Execution:
    """This invocation's entry in the evaluation's ``executions`` list: who ran how many runs, on what."""

    def __init__(self, store: Any, name: str, stored_settings: dict[str, Any], executor: Executor) -> None:
        self.store, self.name, self.settings, self.executor = store, name, stored_settings, executor
        self.entry = {"started": timestamp(), **executor.record(), "runs": 0}
        self.settings.setdefault("executions", []).append(self.entry)
        store.update_evaluation(name, settings=self.settings)

    def finish(self, runs: int, *, status: str) -> None:
        self.entry.update(self.executor.record())
        self.entry.update(runs=runs, finished=timestamp())
        self.store.update_evaluation(self.name, settings=self.settings, status=status)


def _model_name(name: str, expected: str | None, settings: EvalSettings) -> str:
    if expected is not None and name != expected:
        raise ExplorerError(f"evaluation {settings.name!r} ran on model {expected!r}, but {settings.model!r} now "
                            f"loads {name!r}",
                            fix="point --model at the model the evaluation used, or use a new --name")
    return name


def _arm_label(arm: Arm) -> str:
    """A short progress-bar name for arms of one method that differ in config (a sweep)."""
    changed = [f"{k}={v}" for k, v in sorted(arm.given.items()) if k not in RESERVED_FIELDS]
    return f"{arm.name}[{','.join(changed)}]" if changed else arm.name


def _tally_stored(store: Any, settings: EvalSettings, questions: dict[str, list[Question]], names: dict[Arm, str],
                  keys: dict[Arm, str], tally: _Tally) -> None:
    """Start the progress bar's running metrics from the runs a resume skips."""
    by_key = {(a.method, a.variant, keys[a]): a for a in settings.arms}
    wanted = {(d, q.id) for d, qs in questions.items() for q in qs}
    for row, trace in store.traces(evaluation=settings.name):
        arm = by_key.get((trace.method, trace.variant, config_key(trace.config)))
        if arm is not None and trace.status == "complete" and (row["dataset"], row["question_id"]) in wanted:
            tally.add(names[arm], trace)
