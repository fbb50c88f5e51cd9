"""A user's own ``.gguf`` file, de-quantized once and cached by its checksum.

transformers de-quantizes a GGUF on every load, which takes minutes for a few hundred million
parameters on a busy machine. The first load here converts the file into a plain transformers
folder in the cache, named by the file's SHA-256 and the dtype, and every later load reads that
copy (seconds). The key is the content, not the path: a file moved or renamed still hits its
copy, and a file changed in place gets a fresh one. The checksum itself is remembered per file
identity (path, inode, size, modification time), so a second load does not even re-read the GGUF.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from explorer.engine.copies import build_copy, file_key, file_lock, read_manifest, sha256_file, verify_copy
from explorer.errors import ModelError
from explorer.paths import cache_dir

Progress = Callable[[str], None]
_SUMS = "gguf-sums.json"


def _sums_path() -> Path:
    return cache_dir("models") / _SUMS


def gguf_checksum(path: Path) -> str:
    """The file's SHA-256, from the remembered sums when its identity on disk has not changed."""
    key = "|".join(str(x) for x in file_key(path))
    sums_file = _sums_path()
    try:
        sums = json.loads(sums_file.read_text(encoding="utf-8"))
        if not isinstance(sums, dict):
            sums = {}
    except (OSError, ValueError):
        sums = {}
    digest = sums.get(key)
    if isinstance(digest, str) and len(digest) == 64:
        return digest
    digest = sha256_file(path)
    sums[key] = digest
    tmp = sums_file.with_name(f".{_SUMS}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(sums), encoding="utf-8")
        os.replace(tmp, sums_file)
    except OSError:
        pass  # remembering is an optimisation; the copy is still found by the checksum
    return digest


def converted_dir(digest: str, dtype: str) -> Path:
    return cache_dir("models") / f"gguf-{digest[:20]}-{dtype}"


def ensure_converted(gguf_path: Path, dtype: str = "float32", progress: Progress = print) -> Path:
    """The cached transformers copy of ``gguf_path`` in ``dtype``, converting it on first use."""
    gguf_path = gguf_path.expanduser().resolve()
    if not gguf_path.is_file():
        raise ModelError(f"GGUF file {gguf_path} does not exist", fix="check the path")
    digest = gguf_checksum(gguf_path)
    target = converted_dir(digest, dtype)
    manifest = read_manifest(target)
    if manifest is not None and manifest.get("source", {}).get("gguf_sha256") == digest and verify_copy(target):
        return target
    with file_lock(target.with_name(target.name + ".lock")):
        manifest = read_manifest(target)
        if manifest is not None and manifest.get("source", {}).get("gguf_sha256") == digest and verify_copy(target):
            return target
        if target.exists():
            progress(f"the cached copy of {gguf_path.name} at {target} is incomplete or damaged; converting again")
        source = {"gguf_file": gguf_path.name, "gguf_sha256": digest, "gguf_path": str(gguf_path)}
        build_copy(target, lambda _work: gguf_path, source, name=gguf_path.stem, dtype=dtype, progress=progress)
    if not verify_copy(target):
        raise ModelError(f"the converted copy of {gguf_path.name} at {target} failed verification after it was built",
                         fix=f"check free disk space and permissions there, then delete {target} and retry")
    return target
