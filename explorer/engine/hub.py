"""Hub ids (``Qwen/Qwen2.5-7B-Instruct``): from the Hugging Face cache offline, downloaded online.

Users expect a hub id to behave as it does in transformers: the first use downloads it (with
progress bars) into the Hugging Face cache (``HF_HOME``, ``HF_HUB_CACHE``), later uses read it
from there, and on a machine without network a model already in the cache still loads. The cache
location is read from the environment at call time, so a changed ``HF_HOME`` is honoured.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from explorer.errors import ModelError

_TRUTHY = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class CachedSnapshot:
    """A hub model found in the local cache: its folder and the commit it is a snapshot of."""

    folder: Path
    revision: str


def hub_offline() -> bool:
    """Whether the user switched the Hub off (``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``)."""
    return any(os.environ.get(k, "").strip().lower() in _TRUTHY for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable() -> bool:
    """A quick name lookup, so an offline machine fails at once instead of after ~30 s of retries."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache as the environment says now (HF_HUB_CACHE, else HF_HOME/hub)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def cached_snapshot(repo_id: str, revision: str | None = None) -> CachedSnapshot | None:
    """The cached snapshot of ``repo_id`` (its ``main`` unless ``revision``), or None when not cached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(repo_id, revision=revision, cache_dir=str(hub_cache_dir()),
                                        local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError, OSError, ValueError):
        return None
    if not (folder / "config.json").is_file():
        return None
    return CachedSnapshot(folder, folder.name)


def not_cached_error(repo_id: str, *, switched_off: bool) -> ModelError:
    """The error for a hub id that is neither cached nor downloadable, with every way on."""
    why = ("the Hugging Face Hub is switched off (HF_HUB_OFFLINE)" if switched_off
           else "the Hugging Face Hub cannot be reached to fetch it (no network)")
    return ModelError(
        f"{repo_id!r} is not a local path, it is not in the Hugging Face cache ({hub_cache_dir()}), and {why}",
        fix=f"download it once where there is network (`hf download {repo_id}`, or one run with network) and copy "
            "the cache here (or point HF_HOME at it); or pass a local model folder, a .gguf file, or 'embedded'")
