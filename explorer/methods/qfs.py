"""DRAGIN's query formulation from self-attention (QFS), in the paper's and the reference's form.

Both return a :class:`QfsResult` holding the query and everything the explorer shows about how
it was made: every candidate word with its attention weight and whether it was eligible and
chosen, so the heat strip over the context and the "why these words" list read straight from
the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from explorer.engine.generation import Engine, Generation
from explorer.engine.language import get_language, is_stopword
from explorer.engine.signals import merge_words

#: Prompt segments whose tokens QFS may choose from: the question and the answer written so far.
QUERY_SEGMENTS = ("question", "answer")


@dataclass
class QfsResult:
    query: str
    candidates: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None

    def details(self) -> dict[str, Any]:
        chosen = [c["text"] for c in self.candidates if c["chosen"]]
        out: dict[str, Any] = {"candidates": self.candidates, "chosen": chosen}
        if self.note:
            out["qfs_note"] = self.note
        return out


def _word_items(texts: list[str], weights: list[float], segment: str, offset: int) -> list[dict[str, Any]]:
    """Merge tokens into words, keeping each token's weight; a word shows its best token's weight."""
    items = []
    for w in merge_words(texts):
        if not w.text:
            continue
        token_weights = [round(x, 6) for x in weights[w.start:w.end]]
        items.append({"text": w.text, "weight": max(token_weights), "token_weights": token_weights,
                      "segment": segment, "tokens": [offset + w.start, offset + w.end]})
    return items


def paper_query(gen: Generation, trigger: int, top_n: int, *, skip_stopwords: bool) -> QfsResult:
    """The paper's QFS: the trigger token's last-layer attention over the question and the text so far.

    The top-n tokens by attention are kept, mapped to their words and put back in text order.
    With ``skip_stopwords`` (the explorer's default, matching the paper's case study, whose query
    holds only content words) stopwords and punctuation are not candidates.
    """
    row = gen.attention_row(trigger)
    engine = gen._engine
    assert engine is not None  # attention_row above refuses generations without attention
    items: list[dict[str, Any]] = []
    for label, start, end in gen.segments:
        if label in QUERY_SEGMENTS:
            items += _word_items(engine.token_texts(gen.prompt_ids[start:end]), row[start:end], label, start)
    p = len(gen.prompt_ids)
    if trigger > 0:
        items += _word_items(gen.token_texts[:trigger], row[p:p + trigger], "generated", p)
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


def reference_query(engine: Engine, prev_text: str, sentence_words: list[str], flagged: list[bool], top_n: int,
                    *, max_query_tokens: int = 64) -> QfsResult:
    """The reference's QFS ("real words"): re-encode, average attention of the flagged words, keep content words.

    One forward pass over ``prev_text + " " + sentence words``. For every word, the head-mean
    last-layer attention rows of the positions that predicted its tokens, each restricted to
    positions before the word and normalised to sum 1, are averaged; those vectors are averaged
    over the flagged words. Content words (spaCy NOUN, ADJ, VERB, PROPN, NUM, matched as
    substrings as the reference does) that are not themselves flagged are ranked by weight; the
    top n go back in text order. BM25 sees at most the last ``max_query_tokens`` model tokens.
    """
    all_text = (prev_text + " " + " ".join(sentence_words)).strip()
    ids = engine.tokenize(all_text)
    texts = engine.token_texts(ids)
    words = merge_words(texts)
    attn = engine.attention_matrix(ids)  # (q, k) head mean
    n_tok = len(ids)
    word_vectors = []
    for w in words:
        acc = [0.0] * n_tok
        for i in range(w.start, w.end):
            if i == 0 or w.start == 0:
                continue
            v = attn[i - 1, : w.start]
            total = float(v.sum())
            if total > 0:
                for j, x in enumerate((v / total).tolist()):
                    acc[j] += x
        acc = [x / (w.end - w.start) for x in acc]
        word_vectors.append([sum(acc[u.start:u.end]) for u in words])
    current_start = max(0, len(words) - len(sentence_words))
    hit_rows = [word_vectors[current_start + i] for i, f in enumerate(flagged) if f and current_start + i < len(words)]
    note = None
    if not hit_rows:
        note = ("every word over the threshold was removed by the content-word filter; the reference divides by "
                "zero here, so all weights are undefined and the query is arbitrary. The explorer uses zero weights.")
        forward = [0.0] * len(words)
    else:
        forward = [sum(col) / len(hit_rows) for col in zip(*hit_rows, strict=True)]
    real = {t.text for t in get_language().pos_tags(all_text) if t.pos in ("NOUN", "ADJ", "VERB", "PROPN", "NUM")}
    items = []
    for i, w in enumerate(words):
        is_flagged = i >= current_start and (i - current_start) < len(flagged) and flagged[i - current_start]
        eligible = (not is_flagged) and any(r in w.text for r in real)
        items.append({"text": w.text, "weight": forward[i], "eligible": eligible, "flagged": is_flagged,
                      "segment": "current" if i >= current_start else "context", "tokens": [w.start, w.end]})
    ranked = sorted((it for it in items if it["eligible"]), key=lambda it: -it["weight"])[:top_n]
    keep = {id(it) for it in ranked}
    for it in items:
        it["chosen"] = id(it) in keep
    query = " ".join(it["text"] for it in items if it["chosen"])
    q_ids = engine.tokenize(query)
    if len(q_ids) > max_query_tokens:
        query = engine.decode(q_ids[-max_query_tokens:]).strip()
    return QfsResult(query=query, candidates=items, note=note)
