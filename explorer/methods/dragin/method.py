"""DRAGIN: retrieve when a content token is both uncertain and attended to (RIND); query with what it attends to (QFS).

Two variants, because the paper's equations and the authors' code differ (methods.md):

* ``paper``: token-level RIND = entropy x amax x content, amax from later tokens' last-layer
  attention in the same span; retrieval fires at the first token over θ, the output is cut
  right before it, QFS reads that token's attention over the question and the text so far, and
  generation resumes from the cut with the new passages (which replace the old).
* ``reference``: what the authors' ``AttnWeightRAG`` decides (:mod:`reference_rules` holds its
  rules): chunks of ``max_length`` tokens generated without stop strings and decoded with special
  tokens, a second attention pass over the chunk alone, word-level scores normalised per spaCy
  sentence (words given to sentences by searching the sentence text in the joined words; the
  sentence with "the answer is" is checked like any other), the content-word filter after the
  threshold, the cut at the START of the flagged sentence (the earlier sentences re-joined by
  spaces), the "real words" QFS over ``question + " " + text + " " + kept``, exactly the first
  sentence kept after each retrieval, and the case-sensitive "the answer is" stop. Words start at
  whitespace-led and special tokens rather than at Llama's ``▁`` marker, a necessary departure
  (GPT-2-style vocabularies have no ``▁``; the authors' rule would make a whole chunk one word);
  docs/reference-departures.md lists every departure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from explorer.config import param
from explorer.engine.generation import Generation
from explorer.engine.language import get_language
from explorer.engine.signals import Word, aggregate, merge_words
from explorer.methods import common, prompts
from explorer.methods import reference_rules as rules
from explorer.methods.base import Method, register
from explorer.methods.dragin import qfs
from explorer.retrieval.base import Hit
from explorer.trace import TraceRecorder


@dataclass
class DraginConfig(common.RetrievalConfig):
    threshold: float = param(1.2, lo=0.0, hi=1000.0,
                             help="θ: retrieval fires when a score exceeds it (paper table 9: 0.6-1.5 for "
                                  "Llama-2/Vicuna; thresholds do not transfer across models, so sweep it)")
    top_n: int = param(35, lo=1, hi=200, help="tokens QFS keeps for the query (paper: 25 or 35)")
    skip_stopwords: bool = param(True, help="paper QFS: stopwords and punctuation are not query candidates")
    max_query_tokens: int = param(64, lo=4, hi=512, help="reference QFS: BM25 sees at most this many last tokens")


@dataclass
class WordScores:
    """The reference's per-word inputs to the decision: words, attention (sum of token amax), mean entropy."""

    words: list[Word]
    token_attention: list[float]
    attention: list[float]
    entropy: list[float]


def reference_word_scores(token_texts: list[str], special: list[bool], entropies: list[float],
                          heads: torch.Tensor) -> WordScores:
    """From a chunk's tokens, their entropies and the chunk-only pass's last-layer ``(heads, q, k)`` attention.

    A token's attention is its column's max over the queries (diagonal included), averaged over
    heads; a word's is the SUM over its tokens, its entropy the MEAN.
    """
    token_amax = heads.max(dim=1).values.mean(dim=0).tolist()
    words = merge_words(token_texts, special)
    return WordScores(words, token_amax, aggregate(token_amax, words, "sum"), aggregate(entropies, words, "mean"))


@register
class Dragin(Method, name="dragin", title="DRAGIN (RIND + QFS)", config=DraginConfig, variants=("paper", "reference")):
    needs = ("attention_weights",)  # amax and RIND read the last attention layer, QFS its row of the trigger

    def run(self, question: str, rec: TraceRecorder) -> None:
        if self.variant == "paper":
            text, hits = self._run_paper(question, rec)
        else:
            text, hits = self._run_reference(question, rec)
        common.finish(self.engine, rec, self.config, question, text, hits)

    # -- paper ----------------------------------------------------------------------------------
    def _run_paper(self, question: str, rec: TraceRecorder) -> tuple[str, list[Hit]]:
        return common.draft_and_retrieve(self.config, self.engine, self.retriever, rec, question, self._paper_trigger,
                                         attention=True)

    def _paper_trigger(self, rec: TraceRecorder, gen: Generation, start: int) -> common.Trigger | None:
        """RIND's check of one draft; a firing token is cut before and its QFS query searched."""
        cfg = self.config
        fired = self._paper_check(rec, gen, start)
        if fired is None:
            return None
        token = gen.tokens[fired]
        rec.add("trigger", span=gen.event_id, token_index=fired, signal="rind", value=token.rind,
                threshold=cfg.threshold, token=token.text, entropy=token.entropy, amax=token.amax)
        return common.Trigger(fired, "truncated before the token that fired retrieval", source="qfs",
                              trigger_token=token.text,
                              query=lambda: qfs.paper_query(self.engine, gen, fired, cfg.top_n,
                                                            skip_stopwords=cfg.skip_stopwords))

    def _paper_check(self, rec: TraceRecorder, gen: Generation, start: int) -> int | None:
        threshold = self.config.threshold
        units = [{"text": t.text, "value": t.rind, "eligible": t.content and i >= start, "entropy": t.entropy,
                  "amax": t.amax} for i, t in enumerate(gen.tokens)]
        fired = next((i for i, u in enumerate(units)
                      if u["eligible"] and u["value"] is not None and u["value"] > threshold), None)
        return common.check(rec, span=gen.event_id, signal="rind", threshold=threshold, compare=">", units=units,
                            fired=fired, rule="first content token with entropy x amax over the threshold",
                            unit="token")

    # -- reference --------------------------------------------------------------------------------
    def _run_reference(self, question: str, rec: TraceRecorder) -> tuple[str, list[Hit]]:
        """The authors' loop: draft a chunk, check it sentence by sentence, retrieve, keep one sentence, repeat.

        Texts are glued exactly as their code glues them (see :mod:`reference_rules`), so the
        prompts, the re-encoded QFS text and the kept answer match theirs character for character.
        """
        cfg, engine = self.config, self.engine
        lang = get_language()
        shots = common.shots(cfg, question, separator="\n")
        text, hits = "", []
        for rnd in range(cfg.max_rounds):
            rec.step = rnd
            old_len = len(text)
            segments = prompts.build_prompt(question, shots=shots, answer_raw=rules.after_case(text))
            gen = common.generate_reference(engine, rec, segments, max_new_tokens=cfg.max_length, purpose="draft")
            decision = self._reference_check(rec, gen)
            if decision is None:
                text = rules.append_text(text, gen.text)
            else:
                kept = common.cut_before_sentence(rec, gen, decision,
                                                  reason="truncated at the start of the flagged sentence")
                result = qfs.reference_query(engine, question + " " + text + " " + kept, decision.word_texts,
                                             decision.hits, cfg.top_n, max_query_tokens=cfg.max_query_tokens)
                rec.costs.forward_passes += 1
                if result.note:
                    rec.add("note", message=result.note, level="defect")
                hits, retrieval = common.search(rec, self.retriever, result.query, cfg.top_k, source="qfs-reference",
                                                sentence=decision.sentence, **result.details())
                segments = prompts.build_prompt(question, shots=shots, hits=hits, after_search=True,
                                                answer_raw=rules.after_case(text, kept.strip()))
                regen = common.generate_reference(engine, rec, segments, max_new_tokens=cfg.max_length,
                                                  purpose="continuation")
                common.continuation(rec, regen, retrieval)
                first = rules.first_sentence(regen.text, lang)
                self._keep_first(rec, regen, first)
                text = rules.join_nonempty(text.strip(), kept.strip(), first.strip())
            if rules.should_stop(text, old_len, engine.count_tokens(text, special=True), cfg.max_length):
                break
        return text, hits

    @staticmethod
    def _keep_first(rec: TraceRecorder, gen: Generation, first: str) -> None:
        """Record what is cut of a continuation: everything after its first sentence (kept exactly as that sentence)."""
        start = gen.text.find(first) if first else -1
        end = start + len(first) if start >= 0 else len(gen.text)
        index = next((i for i, at in enumerate(gen.offsets()) if at + len(gen.tokens[i].text) > end), len(gen.tokens))
        if index < len(gen.tokens):
            common.cut(rec, gen, index, reason="only the first sentence is kept", kept_as=first)

    def _reference_check(self, rec: TraceRecorder, gen: Generation) -> rules.AttentionDecision | None:
        """Score the chunk as the authors' code does and record the check (and the trigger, if any)."""
        if not gen.ids:
            return None
        engine = self.engine
        heads = engine.attention_matrix(gen.ids, per_head=True, rec=rec)  # (h, q, k) over the chunk only
        scores = reference_word_scores(gen.token_texts, [i in engine.special_ids for i in gen.ids],
                                       [t.entropy for t in gen.tokens], heads)
        words, token_amax = scores.words, scores.token_attention
        units, decision = rules.attention_decision(gen.text, [w.text for w in words], scores.attention,
                                                   scores.entropy, self.config.threshold, get_language())
        for unit in units:
            word = words[unit.pop("word")]
            unit["tokens"] = [word.start, word.end]
        fired = None
        if decision is not None:
            first_word = next(i for i, u in enumerate(units) if u["sentence"] == decision.sentence)
            fired = first_word + decision.over.index(True)
        fired = common.check(rec, span=gen.event_id, signal="rind-reference", threshold=self.config.threshold,
                             compare=">", units=units, fired=fired, unit="word",
                             token_attention=[round(v, 6) for v in token_amax],
                             rule="per sentence: word attention (sum of token amax, normalised to mean 1) x word "
                                  "entropy; the first sentence with a word over the threshold is cut and retrieved for")
        if decision is None or fired is None:  # None also when a fork suppressed this retrieval
            return None
        if not any(decision.hits):
            rec.add("note", level="defect",
                    message=f"sentence {decision.sentence} fired, but every word over the threshold is a non-content "
                            "word; the reference's filter runs only after the threshold test")
        unit = units[fired]
        rec.add("trigger", span=gen.event_id, token_index=unit["tokens"][0], signal="rind-reference",
                value=unit["value"], threshold=self.config.threshold, token=gen.tokens[unit["tokens"][0]].text,
                word=unit["text"], sentence=decision.sentence)
        return decision
