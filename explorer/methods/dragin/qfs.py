"""DRAGIN's query formulation from self-attention (QFS), in the paper's and the reference's form.

Both return a :class:`QfsResult` holding the query and everything the explorer shows about how
it was made: every candidate word with its attention weight and whether it was eligible and
chosen, so the heat strip over the context and the "why these words" list read straight from
the trace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from explorer.engine.attention_rows import attention_rows
from explorer.engine.generation import Engine, Generation
from explorer.engine.language import get_language, is_stopword
from explorer.engine.signals import merge_words
from explorer.methods import common
from explorer.methods import reference_rules as rules

#: Prompt segments whose tokens QFS may choose from: the question and the answer written so far.
QUERY_SEGMENTS = ("question", "answer")


@dataclass
class QfsResult:
    query: str
    candidates: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None
    #: The reference re-encodes a text of its own to read attention from; it is kept here.
    encoded: str | None = None

    def details(self) -> dict[str, Any]:
        chosen = [c["text"] for c in self.candidates if c["chosen"]]
        out: dict[str, Any] = {"candidates": self.candidates, "chosen": chosen}
        if self.note:
            out["qfs_note"] = self.note
        if self.encoded is not None:
            out["encoded"] = self.encoded
        return out


def word_items(texts: list[str], weights: list[float], segment: str, offset: int, *,
               word_weight: Callable[[list[float]], float] | None = None) -> list[dict[str, Any]]:
    """Merge tokens into words, keeping each token's weight (rounded); a word's own weight is
    ``word_weight`` of its tokens' raw weights, by default its best token's (the paper's QFS).

    ETC's query gives a word the SUM over its tokens instead, as its authors sum key columns."""
    items = []
    for w in merge_words(texts):
        if not w.text:
            continue
        token_weights = [round(x, 6) for x in weights[w.start:w.end]]
        weight = max(token_weights) if word_weight is None else word_weight(weights[w.start:w.end])
        items.append({"text": w.text, "weight": weight, "token_weights": token_weights,
                      "segment": segment, "tokens": [offset + w.start, offset + w.end]})
    return items


def paper_query(engine: Engine, gen: Generation, trigger: int, top_n: int, *, skip_stopwords: bool) -> QfsResult:
    """The paper's QFS: the trigger token's last-layer attention over the question and the text so far.

    The top-n tokens by attention are kept, mapped to their words and put back in text order.
    With ``skip_stopwords`` (the explorer's default, matching the paper's case study, whose query
    holds only content words) stopwords and punctuation are not candidates.
    """
    row = engine.attention_over(gen, trigger)
    items: list[dict[str, Any]] = []
    for label, start, end in gen.segments:
        if label in QUERY_SEGMENTS:
            items += word_items(engine.token_texts(gen.prompt_ids[start:end]), row[start:end], label, start)
    p = len(gen.prompt_ids)
    if trigger > 0:
        items += word_items(gen.token_texts[:trigger], row[p:p + trigger], "generated", p)
    for item in items:
        item["eligible"] = not (skip_stopwords and is_stopword(item["text"]))
    # The top-n TOKENS by attention choose their words; two tokens of one word choose it once.
    ranked = sorted(((w, n) for n, item in enumerate(items) if item["eligible"] for w in item["token_weights"]),
                    key=lambda pair: -pair[0])
    chosen = {n for _, n in ranked[:top_n]}
    for n, item in enumerate(items):
        item["chosen"] = n in chosen
    query = " ".join(i["text"] for i in items if i["chosen"])
    return QfsResult(query=query, candidates=items)


def reference_query(engine: Engine, all_text: str, sentence_words: list[str], flagged: list[bool], top_n: int,
                    *, max_query_tokens: int = 64) -> QfsResult:
    """The reference's QFS ("real words"): re-encode the text, weigh earlier words by the flagged words' attention.

    ``all_text`` is what the authors' code re-encodes before the flagged sentence's words:
    ``question + " " + text + " " + kept`` (spacing included: it changes the attention). One
    forward pass over ``all_text + " " + words`` (with the tokenizer's special tokens, as
    ``tokenizer.encode`` adds them), of which only the sentence's rows of last-layer attention are
    computed; :func:`explorer.methods.reference_rules.real_words_query` decides from them. BM25
    then sees the query re-encoded and cut to its last ``max_query_tokens`` tokens.
    """
    text = all_text + " " + " ".join(sentence_words)
    ids = engine.tokenize(text, special=True)
    pieces = engine.token_texts(ids, special=True)
    words = merge_words(pieces, [i in engine.special_ids for i in ids])
    # Only the rows that predicted the sentence's tokens are read: those rows alone are computed, so the
    # memory grows with the text's length, not its square (explorer.engine.attention_rows).
    current = len(sentence_words)
    first = words[len(words) - current].start if 0 < current <= len(words) else len(ids) - 1
    offset = max(0, first - 1)
    attention = attention_rows(engine, ids, offset).double().numpy()  # (rows from offset, keys) head mean
    real = rules.real_words(text, get_language())
    found = rules.real_words_query([(w.start, w.end, w.text) for w in words], attention, current,
                                   flagged, top_n, real, row_offset=offset)
    query = common.truncate_query(engine, found.query, max_query_tokens)
    return QfsResult(query=query, candidates=found.candidates, note=found.note, encoded=text)
