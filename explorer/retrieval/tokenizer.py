"""The word analysis BM25 applies to passages and queries alike.

Defaults follow what the dynamic-RAG papers searched with (Elasticsearch's BM25 over Wikipedia):
lower case, Unicode word characters, the 33 Lucene English stopwords, plus the Snowball English
stemmer, which raised gold-passage recall@5 on NQ (0.843 -> 0.873), HotpotQA (0.705 -> 0.710) and
the demo questions (0.890 -> 0.915) and left MuSiQue level (0.388 -> 0.385); benchmarks/bench_retrieval.py
prints that comparison (results in benchmarks/results/retrieval.md). Accents are folded ("Colisée" matches
"Colisee", which small models often write), and one-character tokens are dropped unless they
are digits ("World War 2" keeps its "2"; the "s" of "Mozart's" goes).

The settings are part of the index cache key, so changing them can never reuse a stale index.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import asdict, dataclass

from explorer.errors import ConfigError

# Lucene's English stop set (the same 33 words bm25s calls "en").
ENGLISH_STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
    "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will", "with",
))
_WORD = re.compile(r"\w+")
_COMBINING = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
STOP = ""  # what term() returns for a word that is not indexed


@dataclass(frozen=True)
class TokenizerSettings:
    """How text becomes index terms; recorded in every trace through ``describe()``."""

    lowercase: bool = True
    fold_accents: bool = True
    stopwords: str = "en"  # "en" or "none"
    stemmer: str | None = "english"  # a PyStemmer (Snowball) algorithm, or None
    min_length: int = 2  # shorter tokens are dropped unless they are digits

    def as_dict(self) -> dict:
        return asdict(self)


def fold(text: str) -> str:
    """Accents removed by canonical decomposition (NFKD also turns ligatures and full-width forms into plain ones)."""
    if text.isascii():
        return text
    return _COMBINING.sub("", unicodedata.normalize("NFKD", text))


class Tokenizer:
    """Text to index terms. Read-only after construction, so concurrent searches may share it."""

    def __init__(self, settings: TokenizerSettings | None = None) -> None:
        self.settings = settings = settings or TokenizerSettings()
        if settings.stopwords not in ("en", "none"):
            raise ConfigError(f"unknown stopword list '{settings.stopwords}'", fix="use 'en' or 'none'")
        if settings.min_length < 1:
            raise ConfigError(f"min_length must be at least 1, got {settings.min_length}")
        self._stop = ENGLISH_STOPWORDS if settings.stopwords == "en" else frozenset()
        self._stemmer = settings.stemmer
        self._local = threading.local()
        if settings.stemmer:
            import Stemmer

            if settings.stemmer not in Stemmer.algorithms():
                raise ConfigError(f"unknown stemmer '{settings.stemmer}'",
                                  fix=f"use one of {', '.join(Stemmer.algorithms())}, or none")

    def words(self, text: str) -> list[str]:
        """Raw word tokens after folding and lower-casing (before stopwords and stemming)."""
        if self.settings.fold_accents:
            text = fold(text)
        if self.settings.lowercase:
            text = text.lower()
        return _WORD.findall(text)

    def term(self, word: str) -> str:
        """The index term of one word from :meth:`words`, or ``STOP`` ("") when it is not indexed."""
        if word in self._stop or (len(word) < self.settings.min_length and not word.isdigit()):
            return STOP
        if self._stemmer:
            return self._thread_stemmer().stemWord(word)
        return word

    def _thread_stemmer(self):
        """PyStemmer objects are not thread-safe, so each thread gets its own."""
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            import Stemmer

            stemmer = self._local.stemmer = Stemmer.Stemmer(self.settings.stemmer)
        return stemmer

    def terms(self, text: str) -> list[str]:
        """Index terms of a text, in order, repeats kept (BM25 counts them)."""
        out = []
        for word in self.words(text):
            term = self.term(word)
            if term:
                out.append(term)
        return out
