"""ETC (Entropy-Trend Constraint, Li et al., AAAI 2026, arXiv 2511.09980): retrieve when the entropy starts to climb.

DRAGIN and FLARE fire on a token that is already uncertain, so the error they retrieve for has
often been written by then. ETC watches the *trend* of the word entropies instead: the second
difference of the entropy series, dynamically smoothed, weighted by attention, fires at the
onset of a sharp rise.

The rules follow the authors' released code (WisdomShell/ETC, ``generate.py``; ``config.json``
for the constants), since the paper's full text is not available here; docs/recent-methods.md
lists each rule with where it comes from and every departure:

* the series is word-level over content words (:mod:`explorer.methods.etc.trend`: word entropy
  = max over its tokens; first and second differences over content words; the dynamic smoothing
  ``M_t = α Δ²H_t + (1-α) Δ²H_{t-1}`` with ``α = 0.9 + 0.1 w``);
* a word's attention is the largest share of its attention (last layer, head mean, one pass over
  prompt and span) that goes to any one word of the span, scaled to mean 1 within its spaCy
  sentence; the indicator is that attention times ``M_t`` (``Generator.generate`` and
  ``ETC.hallucination_check``);
* retrieval fires at the first word whose indicator exceeds θ = ``threshold`` (1.3, the
  released ``hallucination_threshold``; ``absolute`` compares ``|value|``, the released
  ``thres_abs``, off); the text is cut right before that word;
* the query (``ETC.generate_retrieve_qry``): the flagged words' attention over the question and
  the text before the cut, "real words" only (spaCy NOUN/ADJ/VERB/PROPN/NUM, substring match as
  the authors' ``match``), the ``top_n`` = 35 heaviest (``retrieve_keep_top_k``), in text order.

Where this loop departs from the authors' (it is the project's DRAGIN ``paper`` loop): after a
retrieval generation continues with the passages in the prompt and the series restarts with the
span, instead of keeping one sentence of a passage-conditioned continuation and drafting on
without passages; and a continuation keeps at least its first word, so a trigger cannot loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from explorer.config import param
from explorer.engine.generation import Generation
from explorer.engine.language import get_language
from explorer.engine.signals import Word, merge_words
from explorer.methods import common
from explorer.methods import reference_rules as rules
from explorer.methods.base import Method, register
from explorer.methods.dragin.qfs import QUERY_SEGMENTS, QfsResult, word_items
from explorer.methods.etc.trend import Trend, sentence_scores, trend, word_entropies
from explorer.trace import TraceRecorder

SIGNAL = "entropy trend (attention x smoothed Δ²H)"


@dataclass
class EtcConfig(common.RetrievalConfig):
    threshold: float = param(1.3, lo=-100.0, hi=100.0,
                             help="θ: retrieval fires at the first word whose attention x smoothed second "
                                  "difference of the entropy exceeds it (authors' config: 1.3)")
    absolute: bool = param(False, help="compare |value| with θ instead of value (authors' thres_abs, off)")
    top_n: int = param(35, lo=1, hi=200, help="real words the query keeps (authors' retrieve_keep_top_k: 35)")


@dataclass
class SpanScores:
    """What ETC computes for one span: its words, the trend, attention and indicator per word, sentences."""

    words: list[Word]
    trend: Trend
    attention: list[float]
    value: list[float]
    sentence: list[int]
    rows: torch.Tensor  # (span tokens, prompt + span positions): last-layer head-mean attention


def word_attention(rows: torch.Tensor, prompt_len: int, words: list[Word]) -> list[float]:
    """Per span word: the largest share of its attention that lands on one word of the span.

    A word's row is the mean of its tokens' rows; a key word's share is the sum over its tokens;
    the result is divided by the row's total over every position (the authors' normalisation).
    """
    out = []
    for w in words:
        row = rows[w.start:w.end].float().mean(dim=0)
        shares = [float(row[prompt_len + v.start:prompt_len + v.end].sum()) for v in words]
        out.append(max(shares) / (float(row.sum()) + 1e-10))
    return out


@register
class Etc(Method, name="etc", config=EtcConfig,
          title="ETC (retrieve when the model's uncertainty starts rising)"):
    needs = ("attention_weights",)  # the indicator and the query read the last attention layer

    def run(self, question: str, rec: TraceRecorder) -> None:
        text, hits = common.draft_and_retrieve(self.config, self.engine, self.retriever, rec, question, self._trigger,
                                               stop_when_empty=True)
        common.finish(self.engine, rec, self.config, question, text, hits)

    def _trigger(self, rec: TraceRecorder, gen: Generation, start: int) -> common.Trigger | None:
        """ETC's check of one draft (``start``: a continuation keeps at least its first word); a firing word is
        cut before and the authors' query searched."""
        scores = self.score(rec, gen)
        fired = self._check(rec, gen, scores, start)
        if fired is None:
            return None
        word = scores.words[fired]
        return common.Trigger(word.start, "cut before the word where the entropy trend rose past θ",
                              source="etc-query", trigger_token=word.text,
                              query=lambda: self.query(gen, scores, fired))

    def score(self, rec: TraceRecorder, gen: Generation) -> SpanScores:
        """The span's words, trend, attention and indicator, from one attention pass over prompt and span."""
        engine, lang = self.engine, get_language()
        words = merge_words(gen.token_texts, [i in engine.special_ids for i in gen.ids])
        real = rules.real_words(gen.text, lang)
        content = [rules.matches_real_word(w.text, real) for w in words]
        tr = trend(word_entropies([t.entropy for t in gen.tokens], words), content)
        matrix = engine.attention_matrix(list(gen.prompt_ids) + list(gen.ids), rec=rec)
        rows = matrix[len(gen.prompt_ids):]
        attention = word_attention(rows, len(gen.prompt_ids), words)
        sentences = [s.text for s in rules.split_sentences(gen.text, lang)]
        ranges = rules.sentence_word_ranges(sentences, [w.text for w in words]) if sentences else []
        sentence = [-1] * len(words)
        for n, (lo, hi) in enumerate(ranges):
            for k in range(lo, hi):
                sentence[k] = n
        return SpanScores(words, tr, attention, sentence_scores(attention, tr.smooth, ranges), sentence, rows)

    def _check(self, rec: TraceRecorder, gen: Generation, s: SpanScores, start: int) -> int | None:
        cfg, tr = self.config, s.trend
        units: list[dict[str, Any]] = []
        for i, w in enumerate(s.words):
            value = abs(s.value[i]) if cfg.absolute else s.value[i]
            units.append({"text": w.text, "value": value, "eligible": tr.content[i] and w.start >= start,
                          "tokens": [w.start, w.end], "sentence": s.sentence[i], "content": tr.content[i],
                          "entropy": tr.entropy[i], "d1": tr.d1[i], "d2": tr.d2[i], "smooth": tr.smooth[i],
                          "mean": tr.mean[i], "w": tr.weight[i], "attention": s.attention[i]})
        fired = next((i for i, u in enumerate(units) if u["eligible"] and u["value"] > cfg.threshold), None)
        fired = common.check(rec, span=gen.event_id, signal=SIGNAL, threshold=cfg.threshold, compare=">",
                             units=units, fired=fired, unit="word", absolute=cfg.absolute,
                             rule="first content word whose attention (mean 1 in its sentence) x dynamically "
                                  "smoothed second difference of the entropy exceeds the threshold")
        if fired is not None:
            u = units[fired]
            rec.add("trigger", span=gen.event_id, token_index=s.words[fired].start, signal=SIGNAL,
                    value=u["value"], threshold=cfg.threshold, token=u["text"], entropy=u["entropy"],
                    smooth=u["smooth"], attention=u["attention"])
        return fired

    def query(self, gen: Generation, s: SpanScores, fired: int) -> QfsResult:
        """The authors' query: what the flagged words attend to among the question's and earlier text's real words."""
        cfg, engine = self.config, self.engine
        sentence = s.sentence[fired]
        flagged = [i for i in range(fired, len(s.words))
                   if s.sentence[i] == sentence and (abs(s.value[i]) if cfg.absolute else s.value[i]) > cfg.threshold]
        weight = sum(s.rows[s.words[i].start:s.words[i].end].float().mean(dim=0) for i in flagged)
        real = rules.real_words("".join(engine.token_texts(gen.prompt_ids)) + gen.text, get_language())
        items: list[dict[str, Any]] = []
        for label, lo, hi in gen.segments:
            if label in QUERY_SEGMENTS:
                items += word_items(engine.token_texts(gen.prompt_ids[lo:hi]), weight[lo:hi].tolist(), label, lo,
                                    word_weight=_summed)
        p = len(gen.prompt_ids)
        cut = s.words[fired].start
        if cut > 0:
            items += word_items(gen.token_texts[:cut], weight[p:p + cut].tolist(), "generated", p,
                                word_weight=_summed)
        for item in items:
            item["eligible"] = rules.matches_real_word(item["text"], real)
        ranked = sorted((n for n, item in enumerate(items) if item["eligible"]), key=lambda n: -items[n]["weight"])
        chosen = set(ranked[:cfg.top_n])
        for n, item in enumerate(items):
            item["chosen"] = n in chosen
        return QfsResult(query=" ".join(i["text"] for i in items if i["chosen"]), candidates=items)


def _summed(weights: list[float]) -> float:
    """A word's weight in the authors' query: the SUM over its tokens (they sum key columns)."""
    return round(sum(weights), 6)
