"""Passages to BM25 terms, a batch at a time: the text analysis of the streaming index build.

Chunks of passages are analysed exactly as :class:`~explorer.retrieval.tokenizer.Tokenizer`
analyses a query, but a batch of thousands of passages at once: folded and lower-cased as one
string and split once (:func:`words_of_batch`), every distinct word mapped to a small id by the
process that read it (:class:`WordIndexer`), and every distinct word stemmed once, by the build's
parent, into the shared term ids (:class:`Vocabulary`, :class:`WordTables`). Worker processes
run :func:`analyse_records` on batches they read from the passage store themselves.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from explorer.retrieval.passage_store import FIELD, PassageStore
from explorer.retrieval.tokenizer import Tokenizer, TokenizerSettings, fold

SENTINEL = "Q"  # marks passage boundaries in a lower-cased batch: lower-casing leaves no upper-case letter
_WORD = re.compile(r"\w+")

class Vocabulary:
    """Term ids in order of first appearance, and a cache of each raw word's term id (-1: not indexed)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.term_ids: dict[str, int] = {}
        self.terms: list[str] = []
        self.word_ids: dict[bytes, int] = {}
        self._text_bytes = 0  # characters of the words and terms held (for the memory estimate)

    def add_terms(self, terms: Sequence[str]) -> None:
        for term in terms:
            self.term_ids[term] = len(self.terms)
            self.terms.append(term)
            self._text_bytes += len(term)

    def estimated_bytes(self) -> int:
        """Python objects: ~100 bytes per dict entry and string header, plus the characters."""
        return (len(self.word_ids) + len(self.term_ids)) * 100 + len(self.terms) * 36 + 2 * self._text_bytes

    def map_words(self, words: list[bytes], new_terms: list[str]) -> np.ndarray:
        """Term ids of distinct UTF-8 ``words`` (-1: not indexed); new terms get the next ids, in the words' order."""
        ids = np.fromiter(map(self.word_ids.get, words, itertools.repeat(-2)), dtype=np.int32, count=len(words))
        unseen = np.flatnonzero(ids == -2)
        if len(unseen):
            word_ids, term_ids, term_of = self.word_ids, self.term_ids, self.tokenizer.term
            sentinel = self.tokenizer.settings.lowercase  # then "Q" can only be the passage separator
            for at in unseen.tolist():
                word = words[at]
                term = "" if sentinel and word == SENTINEL_BYTES else term_of(word.decode("utf-8"))
                if term:
                    tid = term_ids.get(term)
                    if tid is None:
                        tid = term_ids[term] = len(self.terms)
                        self.terms.append(term)
                        new_terms.append(term)
                        self._text_bytes += len(term)
                else:
                    tid = -1
                word_ids[word] = tid
                self._text_bytes += len(word)
                ids[at] = tid
        return ids


class WordIndexer:
    """Raw words (UTF-8 bytes) to small ids in order of first appearance, kept for a whole build by the
    process that analyses text: each batch reports only the words it is the first to meet."""

    def __init__(self) -> None:
        self.ids: dict[bytes, int] = {}

    def index(self, tokens: list[bytes]) -> tuple[np.ndarray, list[bytes]]:
        known = self.ids
        ids = np.fromiter(map(known.get, tokens, itertools.repeat(-1)), dtype=np.int32, count=len(tokens))
        new: list[bytes] = []
        for at in np.flatnonzero(ids < 0).tolist():
            word = tokens[at]
            found = known.get(word)
            if found is None:
                found = known[word] = len(known)
                new.append(word)
            ids[at] = found
        return ids, new


@dataclass
class BatchWords:
    """A batch of passages analysed where its text was read: the words met there for the first time (in
    order of their ids), the word id of every token, the passage (within the batch) of every token, and
    the process whose word ids these are."""

    new_words: list[bytes]
    ids: np.ndarray
    rows: np.ndarray
    origin: int


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# ASCII bytes that are not word characters become spaces; UTF-8 bytes of other characters stay.
_ASCII_WORDS = bytes(b if b >= 128 or chr(b).isalnum() or b == ord("_") else ord(" ") for b in range(256))
SENTINEL_BYTES = SENTINEL.encode()


def _fold_run(match: re.Match) -> str:
    return fold(match.group())


def _blank_non_words(match: re.Match) -> str:
    run = match.group()
    if run.isalnum():
        return run
    return "".join(ch if ch.isalnum() or ch == "_" else " " for ch in run)


def words_of_batch(texts: list[str], settings: TokenizerSettings) -> list[bytes] | None:
    """The words of ``"\\x00"``-free texts joined by ``"\\x00"``, with the sentinel between passages, as
    ``Tokenizer.words`` finds them in each text (None when the batch cannot be done in one piece).

    Folding, lower-casing and the word pattern all work per character, so the batch is processed as
    one string: accents are folded in its non-ASCII runs only (decomposition never reaches across an
    ASCII character), the whole is lower-cased (keeping the final-sigma rule's context), non-word
    characters become spaces (``\\w`` is exactly ``isalnum() or "_"``, checked for every code point),
    and the UTF-8 bytes are split on spaces. Lower-casing leaves no upper-case letter, so the
    upper-case sentinel cannot be a word of the text."""
    joined = "\x00".join(texts)
    if not settings.lowercase or joined.count("\x00") != len(texts) - 1:
        return None
    if not joined.isascii():
        if settings.fold_accents:
            joined = _NON_ASCII.sub(_fold_run, joined)
        joined = joined.lower()
        joined = _NON_ASCII.sub(_blank_non_words, joined)
    else:
        joined = joined.lower()
    joined = joined.replace("\x00", f" {SENTINEL} ")
    return joined.encode("utf-8").translate(_ASCII_WORDS).split()


def analyse_records(records: list[str], settings: TokenizerSettings, indexer: WordIndexer,
                    origin: int = 0) -> BatchWords:
    """The words of store records ``id\\x1ftitle\\x1ftext``, as ``Tokenizer.words(title + " " + text)`` gives
    them, as ids of ``indexer``. Needs nothing else, so worker processes run it."""
    texts = [r[r.index(FIELD) + 1:].replace(FIELD, " ") for r in records]  # "title text"
    tokens = words_of_batch(texts, settings)
    if tokens is None:
        tokenizer = Tokenizer(settings)
        tokens, rows_list = [], []
        for row, text in enumerate(texts):
            found = [w.encode("utf-8") for w in tokenizer.words(text)]
            tokens.extend(found)
            rows_list.extend([row] * len(found))
        ids, new = indexer.index(tokens)
        return BatchWords(new, ids, np.asarray(rows_list, dtype=np.int32), origin)
    ids, new = indexer.index(tokens)
    boundary = ids == indexer.ids[SENTINEL_BYTES] if len(texts) > 1 else np.zeros(len(ids), dtype=bool)
    rows = np.cumsum(boundary, dtype=np.int32)
    keep = ~boundary
    return BatchWords(new, ids[keep], rows[keep], origin)


class WordTables:
    """The parent's view of each analysing process's word ids: their term ids (-1: not indexed)."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self.tables: dict[int, np.ndarray] = {}

    def term_ids(self, batch: BatchWords, new_terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(term ids, passage of each) of an analysed batch."""
        table = self.tables.get(batch.origin, np.zeros(0, dtype=np.int32))
        if batch.new_words:
            table = np.concatenate([table, self.vocab.map_words(batch.new_words, new_terms)])
            self.tables[batch.origin] = table
        ids = table[batch.ids] if len(batch.ids) else np.zeros(0, np.int32)
        keep = ids >= 0
        return ids[keep], batch.rows[keep]

    def estimated_bytes(self) -> int:
        """The analysing processes' word dictionaries (~100 bytes a word) and these tables."""
        return sum(len(t) * 104 for t in self.tables.values())


# Worker processes of a build: each opens the store itself and analyses the batches it is given.
_worker_store: PassageStore | None = None
_worker_settings: TokenizerSettings | None = None
_worker_indexer = WordIndexer()


def _worker_init(store_folder: str, settings: TokenizerSettings, parent: int) -> None:
    global _worker_store, _worker_settings
    _worker_store, _worker_settings = PassageStore(Path(store_folder)), settings

    def exit_with_parent() -> None:  # a build killed outright must not leave its workers behind
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True).start()


def _worker_analyse(start: int, stop: int) -> BatchWords:
    assert _worker_store is not None and _worker_settings is not None
    return analyse_records(_worker_store.records_text(start, stop), _worker_settings, _worker_indexer, os.getpid())


