"""FLARE: look ahead one sentence; if the model was unsure of any token in it, retrieve and write it again.

* ``paper``: a look-ahead sentence fires retrieval when ANY of its tokens has probability below
  θ; the query is that sentence with the unsure tokens removed; the sentence is regenerated with
  the passages and the regenerated one is kept.
* ``reference`` (the DRAGIN authors' FLARE baseline, ``TokenRAG``; rules in :mod:`reference_rules`):
  no retrieval before writing; a chunk of ``max_length`` tokens generated without stop strings
  and without passages; each sentence's score is the mean of 1 - p over the tokens the code's
  string walk gives it (plus one); at the first sentence over θ the sentences before it are kept
  (re-joined by spaces), the query is that sentence with its tokens whose 1 - p exceeds θ cut
  out, and the continuation generated with the passages is appended whole. The loop stops at
  ``max_length`` tokens, without progress, or at a case-sensitive "the answer is".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.config import param
from explorer.engine.generation import Generation
from explorer.engine.language import get_language
from explorer.engine.signals import merge_words
from explorer.methods import common, prompts
from explorer.methods import reference_rules as rules
from explorer.methods.base import Method, register
from explorer.retrieval.base import Hit
from explorer.trace import TraceRecorder


@dataclass
class FlareConfig(common.IterativeConfig):
    threshold: float = param(0.2, lo=0.0, hi=1.0,
                             help="θ. paper: a token with probability below θ fires (FlashRAG uses 0.2); "
                                  "reference: a sentence whose mean 1-p exceeds θ fires (configs: 0.06-0.4)")
    lookahead_tokens: int = param(64, lo=4, hi=512, help="paper: most tokens of one look-ahead sentence")


def _words_masked(tokens: list[Any], low: list[bool]) -> tuple[str, list[str]]:
    """Word-level mask for the paper variant: a word goes when any of its tokens is unsure.

    Dropping sub-word pieces would leave fragments such as "iston" that no search engine can use;
    whole words are what the paper's case study shows being removed.
    """
    kept, dropped = [], []
    for word in merge_words([t.text for t in tokens]):
        (dropped if any(low[word.start:word.end]) else kept).append(word.text)
    return " ".join(w for w in kept if w), [w for w in dropped if w]


@register
class Flare(Method, name="flare", config=FlareConfig, variants=("paper", "reference"),
             title="FLARE (active retrieval on low-probability tokens)"):
    variant_defaults = {"reference": {"initial_retrieval": False}}  # TokenRAG drafts before any retrieval

    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg = self.config
        hits, retrieval = common.initial_search(rec, self.retriever, question, cfg)  # FLARE starts from q
        loop = self._paper if self.variant == "paper" else self._reference
        text, hits = loop(question, rec, hits, retrieval)
        common.finish(self.engine, rec, cfg, question, text, hits)

    # -- paper ----------------------------------------------------------------------------------
    def _sentence(self, rec: TraceRecorder, segments: prompts.Segments, budget: int, purpose: str) -> Generation:
        return common.generate(self.engine, rec, segments, max_new_tokens=min(self.config.lookahead_tokens, budget),
                               purpose=purpose, until=common.second_sentence_started)

    def _paper(self, question: str, rec: TraceRecorder, hits: list[Hit],
               retrieval: int | None) -> tuple[str, list[Hit]]:
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question)
        text = ""
        for budget in common.budgeted_rounds(rec, engine, cfg, lambda: text):  # noqa: B023 (read each round)
            segments = prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=text)
            gen = self._sentence(rec, segments, budget, "lookahead")
            common.continuation(rec, gen, retrieval)
            end = common.token_at_char(gen, common.first_sentence_end(gen.text))
            tokens = gen.tokens[:end]
            low = [t.prob < cfg.threshold for t in tokens]
            units = [{"text": t.text, "value": t.prob, "eligible": True} for t in tokens]
            fired = low.index(True) if any(low) else None
            fired = common.check(rec, span=gen.event_id, signal="prob", threshold=cfg.threshold, compare="<",
                                 units=units, fired=fired, unit="token",
                                 rule="any token of the look-ahead sentence below the threshold")
            if fired is not None:
                rec.add("trigger", span=gen.event_id, token_index=fired, signal="prob", value=tokens[fired].prob,
                        threshold=cfg.threshold, token=tokens[fired].text)
                common.cut(rec, gen, 0, reason="the look-ahead sentence is regenerated with retrieved passages")
                query, masked = _words_masked(tokens, low)
                hits, retrieval = common.search(rec, self.retriever, query, cfg.top_k, source="masked-sentence",
                                                sentence="".join(t.text for t in tokens).strip(), masked=masked)
                segments = prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=text)
                gen = self._sentence(rec, segments, budget, "regenerated")
                common.continuation(rec, gen, retrieval)
                sentence = common.keep_first_sentence(rec, gen)
            else:
                sentence = common.cut(rec, gen, end, reason="only the look-ahead sentence is kept")
                retrieval = None
            if not sentence.strip():
                break
            text = prompts.join_text(text, sentence)
            if prompts.has_answer(text) or (gen.stopped_by in ("eos", "stop_string") and sentence == gen.text):
                break
        return text, hits

    # -- reference --------------------------------------------------------------------------------
    def _reference(self, question: str, rec: TraceRecorder, hits: list[Hit],
                   retrieval: int | None) -> tuple[str, list[Hit]]:
        """The authors' ``TokenRAG`` loop: draft a chunk, check its sentences, retrieve, append the continuation whole.

        Their drafts carry no passages: passages from a retrieval go into the one continuation
        written with them and are then dropped (initial passages, off by default for this variant,
        stay in every draft). Texts are glued exactly as their code glues them.
        """
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question, separator="\n")
        initial = hits
        text = ""
        for rnd in range(cfg.max_rounds):
            rec.step = rnd
            old_len = len(text)
            segments = prompts.build_prompt(question, shots=shots, hits=initial, answer_raw=" " + text)
            gen = common.generate_reference(engine, rec, segments, max_new_tokens=cfg.max_length, purpose="draft")
            common.continuation(rec, gen, retrieval)
            decision = self._reference_check(rec, gen)
            if decision is None:
                text = rules.append_text(text, gen.text)
            else:
                kept = common.cut_before_sentence(rec, gen, decision, reason="sentences before the unsure one are kept")
                query = common.truncate_query(engine, decision.masked_sentence.replace(rules.MASK, ""),
                                              rules.MAX_QUERY_TOKENS)
                hits, retrieval = common.search(rec, self.retriever, query, cfg.top_k, source="masked-sentence",
                                                masked=decision.masked_tokens, sentence=decision.masked_sentence)
                segments = prompts.build_prompt(question, shots=shots, hits=hits, after_search=True,
                                                answer_raw=" " + text + " " + kept.strip())
                regen = common.generate_reference(engine, rec, segments, max_new_tokens=cfg.max_length,
                                                  purpose="continuation")
                common.continuation(rec, regen, retrieval)
                text = text.strip() + " " + kept.strip() + " " + regen.text.strip()
            retrieval = None
            if rules.should_stop(text, old_len, engine.count_tokens(text, special=True), cfg.max_length):
                break
        return text, hits

    def _reference_check(self, rec: TraceRecorder, gen: Generation) -> rules.TokenDecision | None:
        """Check the chunk as the authors' code does (tokens decoded one by one) and record the check and trigger."""
        engine = self.engine
        tokens = [engine.decode([i], special=True) for i in gen.ids]
        units, decision = rules.token_decision(gen.text, tokens, [t.logprob for t in gen.tokens],
                                               self.config.threshold, get_language())
        fired = decision.sentence if decision is not None else None
        if common.check(rec, span=gen.event_id, signal="mean(1-p)", threshold=self.config.threshold, compare=">",
                        units=units, fired=fired, unit="sentence", decoded_tokens=tokens,
                        rule="first sentence whose mean 1 - p over the tokens the code gives it exceeds the "
                             "threshold") is None:
            return None  # no sentence fired, or a fork suppressed this retrieval
        if decision is not None and decision.tokens:
            first = decision.tokens.start
            rec.add("trigger", span=gen.event_id, token_index=first, signal="mean(1-p)", value=decision.score,
                    threshold=self.config.threshold, token=gen.tokens[first].text, sentence=decision.sentence)
        return decision
