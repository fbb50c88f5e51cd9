"""Cutting documents into retrievable passages of at most 100 words (the DPR ``psgs_w100`` convention).

Every piece keeps its document's title, because a passage such as "It opened in 1958 ..." is
useless to a model (and to BM25) without knowing what "it" is.

Ids are stable: a document that fits keeps its own id, a longer one becomes ``<id>#1``,
``<id>#2``, ... Documents that come without an id (HotpotQA, MuSiQue and NQ paragraphs, the
2WikiMultihopQA corpus) get :func:`content_id`, a hash of their whitespace-normalised title and
text. That makes the id a pure function of the paragraph, so the benchmark corpus and the gold
labels of the question sets agree without either having to read the other:
:func:`paragraph_passage_ids` is the one function both use.

Pieces are balanced (a 130-word document becomes 65 + 65 words, not 100 + 30): same number of
pieces as the DPR cut, but no stub passages that carry a handful of words and match nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from explorer.retrieval.base import Passage

MAX_WORDS = 100
PIECE_SEPARATOR = "#"


@dataclass(frozen=True)
class Document:
    """A unit of source text before splitting: an article, a paragraph, a file.

    ``where`` (file and line or item) is kept only so that a later problem, such as an id used
    twice, can still be reported at its place in the file.
    """

    id: str
    title: str
    text: str
    where: str = field(default="", compare=False)


def normalize_space(text: str) -> str:
    """Collapse runs of whitespace to one space and strip the ends."""
    return " ".join(text.split())


def content_id(title: str, text: str) -> str:
    """A 12-hex-digit id derived from the paragraph itself (whitespace differences ignored).

    48 bits keep the chance of any collision among a million paragraphs below one in 500.
    """
    key = f"{normalize_space(title)}\x1f{normalize_space(text)}".encode()
    return hashlib.blake2b(key, digest_size=6).hexdigest()


def piece_ranges(n_words: int, max_words: int = MAX_WORDS) -> list[tuple[int, int]]:
    """Word ranges [start, end) of the ceil(n / max_words) balanced pieces of an n-word text."""
    if max_words < 1:
        raise ValueError(f"max_words must be at least 1, got {max_words}")
    if n_words <= 0:
        return []
    count = -(-n_words // max_words)
    base, extra = divmod(n_words, count)
    ranges, start = [], 0
    for n in range(count):
        end = start + base + (1 if n < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges


def split_text(text: str, max_words: int = MAX_WORDS) -> list[str]:
    """The text cut into ceil(n / max_words) consecutive pieces of nearly equal word counts.

    A text that fits is returned unchanged (stripped); pieces of a longer one are re-joined with
    single spaces. A text with no words gives no pieces.
    """
    return split_text_counted(text, max_words)[0]


def split_text_counted(text: str, max_words: int = MAX_WORDS) -> tuple[list[str], list[int], list[str]]:
    """:func:`split_text`'s pieces with the word count of each and the text's words (one split for all three,
    which is what a streaming build of millions of passages needs)."""
    words = text.split()
    if 0 < len(words) <= max_words:  # the common case, without computing ranges
        return [text.strip()], [len(words)], words
    ranges = piece_ranges(len(words), max_words)
    if len(ranges) == 1:
        return [text.strip()], [len(words)], words
    return [" ".join(words[start:end]) for start, end in ranges], [end - start for start, end in ranges], words


def piece_ids(doc_id: str, pieces: int) -> list[str]:
    """``[doc_id]`` for one piece, ``[doc_id#1, doc_id#2, ...]`` for several."""
    if pieces <= 1:
        return [doc_id] if pieces == 1 else []
    return [f"{doc_id}{PIECE_SEPARATOR}{n}" for n in range(1, pieces + 1)]


def split_document(doc: Document, max_words: int = MAX_WORDS) -> list[Passage]:
    """The document's passages, each with the document's title."""
    pieces = split_text(doc.text, max_words)
    return [Passage(id=pid, title=doc.title, text=piece)
            for pid, piece in zip(piece_ids(doc.id, len(pieces)), pieces, strict=True)]


def split_documents(docs: Iterable[Document], max_words: int = MAX_WORDS) -> Iterator[Passage]:
    for doc in docs:
        yield from split_document(doc, max_words)


def paragraph_document(title: str, text: str, where: str = "") -> Document:
    """An id-less paragraph as a Document with its content id."""
    return Document(id=content_id(title, text), title=title, text=text, where=where)


def paragraph_passage_ids(title: str, text: str, max_words: int = MAX_WORDS, *,
                          word_spans: Iterable[tuple[int, int]] | None = None) -> list[str]:
    """The ids that the paragraph's passages have in any corpus built from id-less paragraphs.

    This is how gold paragraphs of HotpotQA, MuSiQue, 2WikiMultihopQA and NQ become passage ids of
    the benchmark corpus. ``word_spans`` ([start, end) word offsets in the paragraph, e.g. of its
    supporting sentences) keeps only the pieces that overlap them, so a long paragraph is not gold
    in the piece that lacks the evidence; without spans every piece is returned.
    """
    ranges = piece_ranges(len(text.split()), max_words)
    ids = piece_ids(content_id(title, text), len(ranges))
    if word_spans is None:
        return ids
    spans = [(start, end) for start, end in word_spans if end > start]
    return [pid for pid, (lo, hi) in zip(ids, ranges, strict=True)
            if any(start < hi and end > lo for start, end in spans)]


def sentence_spans(sentences: Iterable[str]) -> list[tuple[int, int]]:
    """Word ranges of each sentence inside ``join_sentences(sentences)`` (every join falls on whitespace)."""
    spans, at = [], 0
    for sentence in sentences:
        n = len(sentence.split())
        spans.append((at, at + n))
        at += n
    return spans


def join_sentences(sentences: Iterable[str]) -> str:
    """Sentences of a HotpotQA / 2WikiMultihopQA paragraph as one text.

    HotpotQA keeps the leading space on every sentence after the first; 2WikiMultihopQA does not.
    A space is added only where neither side has one, so both give the paragraph as written.
    """
    out = ""
    for sentence in sentences:
        if out and not out[-1].isspace() and not sentence[:1].isspace():
            out += " "
        out += sentence
    return out.strip()
