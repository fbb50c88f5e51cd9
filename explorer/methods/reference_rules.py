"""The decision rules of the DRAGIN authors' public code, as pure functions of what the model produced.

The ``reference`` variants promise to decide what the authors' code decides: DRAGIN's
``AttnWeightRAG`` and its FLARE baseline ``TokenRAG`` in ``src/generate.py`` of the DRAGIN
repository (the file's latest version). That code decides with string operations whose details
change decisions: which words belong to which sentence (it searches each sentence's text in the
joined words), how the kept sentences are re-joined, which single sentence of a continuation is
kept, how texts are glued together with spaces. They are reproduced here rule for rule, and kept
free of model calls: given the recorded tokens, entropies, probabilities and attention, each
function returns the decision the authors' code would make. That keeps the methods short and lets
a test replay the same recorded outputs through an independent implementation.

One rule cannot be kept and is replaced by the project's general one: the authors start a word
at a token carrying Llama's ``▁`` space marker or the Llama newline id 13. GPT-2-style
vocabularies (SmolLM2, Qwen, GPT-2) never produce ``▁``, so on them that code merges a whole
100-token chunk into one "word". Here a word starts at a token whose decoded text begins with
whitespace, at a special token, and right after one (the authors also break after ``</s>``).
docs/reference-departures.md lists this and every other departure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from explorer.engine.language import CONTENT_POS, Language

#: The authors' loops stop once the text contains this, matched case-sensitively.
STOP_PHRASE = "the answer is"
#: The authors' retrieve() sends BM25 at most this many last tokens of every query.
MAX_QUERY_TOKENS = 64
#: What the authors' FLARE baseline writes in place of an unsure token before dropping it.
MASK = "[xxx]"


class Sentence(NamedTuple):
    """A sentence as the authors' code sees it: spaCy's text, stripped, and where that text starts."""

    text: str
    start: int


def split_sentences(text: str, lang: Language) -> list[Sentence]:
    """spaCy sentences of ``text``, stripped, empty ones dropped (``[s.text.strip() for s in nlp(text).sents]``)."""
    out = []
    for s in lang.sentences(text):
        stripped = s.text.strip()
        if stripped:
            out.append(Sentence(stripped, s.start_char + len(s.text) - len(s.text.lstrip())))
    return out


# -- texts the loops build ----------------------------------------------------------------------

def join_nonempty(*parts: str) -> str:
    """``" ".join(s for s in parts if len(s) > 0)``: how DRAGIN's loop glues prompt and answer pieces."""
    return " ".join(p for p in parts if len(p) > 0)


def after_case(*parts: str) -> str:
    """What follows ``Answer:`` in the prompt: ``" ".join`` of the case and the non-empty parts, minus the case."""
    tail = join_nonempty(*parts)
    return " " + tail if tail else ""


def append_text(text: str, new: str) -> str:
    """``text.strip() + " " + new.strip()``: a chunk kept whole (note the leading space when text was empty)."""
    return text.strip() + " " + new.strip()


def should_stop(text: str, old_len: int, token_count: int, max_length: int) -> bool:
    """The loops' stop rule: more than ``max_length`` tokens, no progress, or the (case-sensitive) answer phrase."""
    return token_count > max_length or len(text) <= old_len or STOP_PHRASE in text


def first_sentence(text: str, lang: Language) -> str:
    """The first non-empty sentence of ``text``, stripped (what is kept of a continuation), or ""."""
    sentences = split_sentences(text, lang)
    return sentences[0].text if sentences else ""


def real_words(text: str, lang: Language) -> set[str]:
    """Texts of the spaCy tokens tagged NOUN, ADJ, VERB, PROPN or NUM: the code's "real words"."""
    return {t.text for t in lang.pos_tags(text) if t.pos in CONTENT_POS}


def matches_real_word(word: str, real: set[str]) -> bool:
    """The code's test: some real word is a SUBSTRING of the word (so "ran" matches "Orange")."""
    return any(r in word for r in real)


# -- DRAGIN: which sentence fires ----------------------------------------------------------------

def sentence_word_ranges(sentences: Sequence[str], words: Sequence[str]) -> list[tuple[int, int]]:
    """The words ``[lo, hi)`` the authors' code gives each sentence.

    A sentence other than the last ends at the first word ``i`` (searched from one past its
    start) such that the sentence text occurs in ``" ".join(words[lo:i])``; the last sentence takes
    every remaining word. A sentence never found gets no words, and the next sentence starts where
    it did.
    """
    ranges = []
    start = 0
    for index, sentence in enumerate(sentences):
        if index == len(sentences) - 1:
            ranges.append((start, len(words)))
            continue
        end = start
        for i in range(start + 1, len(words)):
            if sentence in " ".join(words[start:i]):
                end = i
                break
        ranges.append((start, end))
        start = end
    return ranges


@dataclass
class AttentionDecision:
    """Where DRAGIN's reference fires: the sentence, its words, which of them are hallucinated, and the kept text."""

    sentence: int
    words: range
    word_texts: list[str]
    hits: list[bool]
    kept_text: str
    sentence_start: int
    over: list[bool] = field(default_factory=list)


def attention_decision(text: str, words: Sequence[str], attention: Sequence[float], entropy: Sequence[float],
                       threshold: float, lang: Language) -> tuple[list[dict[str, Any]], AttentionDecision | None]:
    """Score every word per sentence and find the first sentence with a word over ``threshold``.

    A sentence's word attentions are normalised to sum 1 and multiplied by its word count, then by
    each word's entropy. At the first sentence where some value exceeds the threshold, words that
    are not real words of that sentence (tagged on the sentence alone) lose their flag, which can
    leave none flagged; the kept text is the earlier sentences joined by single spaces. Returns one
    unit per scored word (every sentence, for replay at other thresholds) and the decision.
    """
    sentences = split_sentences(text, lang)
    units: list[dict[str, Any]] = []
    decision: AttentionDecision | None = None
    for index, (sentence, (lo, hi)) in enumerate(zip(sentences, sentence_word_ranges([s.text for s in sentences],
                                                                                        words), strict=True)):
        if hi <= lo:
            continue
        span = np.asarray(attention[lo:hi], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            normalised = span / span.sum()
        values = [float(normalised[i - lo] * entropy[i] * (hi - lo)) for i in range(lo, hi)]
        over = [v > threshold for v in values]  # NaN (a sentence with zero attention) never fires
        real = real_words(sentence.text, lang)
        content = [matches_real_word(words[i], real) for i in range(lo, hi)]
        for i in range(lo, hi):
            units.append({"text": words[i], "value": None if math.isnan(values[i - lo]) else values[i - lo],
                          "sentence": index, "content": content[i - lo], "attention": float(attention[i]),
                          "entropy": float(entropy[i]), "eligible": True, "word": i})
        if decision is None and any(over):
            decision = AttentionDecision(
                sentence=index, words=range(lo, hi), word_texts=list(words[lo:hi]),
                hits=[o and c for o, c in zip(over, content, strict=True)],
                kept_text=" ".join(s.text for s in sentences[:index]), sentence_start=sentence.start, over=over)
    return units, decision


# -- DRAGIN: what to search for ("real words" QFS) ----------------------------------------------

@dataclass
class QueryWords:
    """The reference QFS result: the query and every word with its weight and why it was or was not chosen."""

    query: str
    candidates: list[dict[str, Any]]
    note: str | None = None


def real_words_query(words: Sequence[tuple[int, int, str]], attention: np.ndarray, current: int,
                     hits: Sequence[bool], top_n: int, real: set[str], *, row_offset: int = 0) -> QueryWords:
    """The authors' ``keep_real_words``, given the re-encoded text's words and last-layer attention.

    ``words`` are ``(first token, end token, text)`` of the re-encoded text; ``attention`` is the
    head-mean ``(query, key)`` matrix of its last layer; the last ``current`` words are the flagged
    sentence's, ``hits`` their flags. For each word, the rows of the positions that predicted its
    tokens are cut to the positions before the word, normalised to sum 1, averaged over its tokens
    and summed per word; those vectors are averaged over the flagged words (all NaN when no word is
    flagged, where the code divides by zero). Words that contain a real word and are not flagged
    themselves are ranked by that weight; the top n go back in text order.

    Only the flagged sentence's rows are read, so ``attention`` may hold just the rows from
    ``row_offset`` on (row ``r`` of it is position ``row_offset + r``; the keys are all positions).
    """
    n_tokens = attention.shape[1]
    start = len(words) - current
    per_word: dict[int, list[float]] = {}
    for index in range(max(start, 0), len(words)):
        first, end, _text = words[index]
        acc = np.zeros(n_tokens, dtype=np.float64)
        for i in range(first, end):
            if i == 0:
                continue
            row = attention[i - 1 - row_offset, :first]
            with np.errstate(divide="ignore", invalid="ignore"):
                acc[:first] += row / row.sum()
        acc /= end - first
        per_word[index] = [float(acc[a:b].sum()) for a, b, _ in words]
    rows = [per_word[start + i] for i, hit in enumerate(hits) if hit and start + i < len(words)]
    note = None
    if rows:
        weights = [sum(col) / len(rows) for col in zip(*rows, strict=True)]
    else:
        weights = [math.nan] * len(words)
        note = ("every word over the threshold was removed by the content-word filter: the authors' code then "
                "divides by zero, every weight is NaN, and the query is the first real words in text order")
    candidates = []
    for i, (first, end, text) in enumerate(words):
        flagged = i >= start and i - start < len(hits) and bool(hits[i - start])
        candidates.append({"text": text, "weight": None if math.isnan(weights[i]) else weights[i],
                           "eligible": (not flagged) and matches_real_word(text, real), "flagged": flagged,
                           "segment": "current" if i >= start else "context", "tokens": [first, end]})
    eligible = [i for i, c in enumerate(candidates) if c["eligible"]]
    # Python's sort, as the code uses it: stable, descending, NaN comparing false to everything.
    ranked = sorted(eligible, key=lambda i: weights[i], reverse=True)[: min(top_n, len(eligible))]
    chosen = set(ranked)
    for i, c in enumerate(candidates):
        c["chosen"] = i in chosen
    return QueryWords(query=" ".join(words[i][2] for i in sorted(chosen)), candidates=candidates, note=note)


# -- FLARE (the authors' TokenRAG baseline) -----------------------------------------------------

@dataclass
class TokenDecision:
    """Where the reference FLARE fires: the sentence, the tokens the code gave it, the masked sentence."""

    sentence: int
    tokens: range
    kept_text: str
    masked_sentence: str
    masked_tokens: list[str]
    sentence_start: int
    score: float


def sentence_token_end(sentence: str, tokens: Sequence[str], start: int) -> int:
    """How far the code's token walk gets from ``start`` through ``sentence``.

    Each token is searched in the sentence from ``pos`` on, and ``pos`` becomes the match's
    offset INSIDE that remainder plus the token's length (not an absolute position), so the
    walk can stop early or run into the next sentence's tokens; a token with a leading space
    never matches the stripped start of a later sentence.
    """
    pos, end = 0, start
    while end < len(tokens):
        found = sentence[pos:].find(tokens[end])
        if found == -1:
            break
        pos = found + len(tokens[end])
        end += 1
    return end


def mask_tokens(sentence: str, tokens: Sequence[str], unsure: Sequence[float], threshold: float) -> str:
    """Replace each token whose 1 - p exceeds the threshold with ``[xxx]``, searching from ``pos`` as the code does.

    A token not found (the code adds ``pos`` to ``find``'s -1) is replaced one character before ``pos``.
    """
    pos = 0
    for value, token in zip(unsure, tokens, strict=False):
        at = sentence[pos:].find(token) + pos
        if value > threshold:
            sentence = sentence[:at] + MASK + sentence[at + len(token):]
            pos = at + len(MASK)
        else:
            pos = at + len(token)
    return sentence


def token_decision(text: str, tokens: Sequence[str], logprobs: Sequence[float], threshold: float,
                   lang: Language) -> tuple[list[dict[str, Any]], TokenDecision | None]:
    """The reference FLARE's check: per sentence, the mean of 1 - p over the tokens its walk reached.

    ``tokens`` are the tokens decoded one by one (``tokenizer.decode(t)``, special tokens kept).
    The mean runs over one token more than the walk reached, and the next sentence's walk starts
    one token after it. Every sentence is checked, "the answer is" included; at the first whose
    mean exceeds the threshold the earlier sentences are kept (joined by spaces) and the sentence's
    unsure tokens are masked. Returns one unit per sentence and the decision.
    """
    sentences = split_sentences(text, lang)
    units: list[dict[str, Any]] = []
    decision: TokenDecision | None = None
    start = 0
    for index, sentence in enumerate(sentences):
        end = sentence_token_end(sentence.text, tokens, start)
        window = range(start, min(end + 1, len(tokens)))
        unsure = [1.0 - math.exp(logprobs[i]) for i in window]
        score = float(np.mean(unsure)) if unsure else math.nan
        units.append({"text": sentence.text, "value": None if math.isnan(score) else score, "eligible": True,
                      "sentence": index, "tokens": [window.start, window.stop]})
        if decision is None and score > threshold:
            window_tokens = [tokens[i] for i in window]
            decision = TokenDecision(
                sentence=index, tokens=window, kept_text=" ".join(s.text for s in sentences[:index]),
                masked_sentence=mask_tokens(sentence.text, window_tokens, unsure, threshold),
                masked_tokens=[t for t, u in zip(window_tokens, unsure, strict=True) if u > threshold],
                sentence_start=sentence.start, score=score)
        start = end + 1
    return units, decision
