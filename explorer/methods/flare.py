"""FLARE: look ahead one sentence; if the model was unsure of any token in it, retrieve and write it again.

* ``paper``: a look-ahead sentence fires retrieval when ANY of its tokens has probability below
  θ; the query is that sentence with the unsure tokens removed; the sentence is regenerated with
  the passages and the regenerated one is kept.
* ``reference`` (the DRAGIN authors' FLARE baseline): a chunk of ``max_length`` tokens is
  generated; each sentence's score is the mean of 1 - p over its tokens; at the first sentence
  over θ the sentences before it are kept, the query is that sentence without its tokens whose
  1 - p exceeds θ, and the continuation generated with the passages is appended whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.config import param
from explorer.engine.generation import Generation
from explorer.engine.language import get_language
from explorer.engine.signals import merge_words
from explorer.methods import common, prompts
from explorer.methods.base import Method, register
from explorer.retrieval.base import Hit
from explorer.trace import TraceRecorder


@dataclass
class FlareConfig(common.IterativeConfig):
    threshold: float = param(0.2, lo=0.0, hi=1.0,
                             help="θ. paper: a token with probability below θ fires (FlashRAG uses 0.2); "
                                  "reference: a sentence whose mean 1-p exceeds θ fires (configs: 0.06-0.4)")
    lookahead_tokens: int = param(64, lo=4, hi=512, help="paper: most tokens of one look-ahead sentence")


def _masked(tokens: list[Any], drop: list[bool]) -> str:
    """The tokens' text without the dropped ones (the reference's token-level mask)."""
    return "".join(t.text for t, d in zip(tokens, drop, strict=True) if not d).strip()


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
class Flare(Method):
    name = "flare"
    title = "FLARE (active retrieval on low-probability tokens)"
    variants = ("paper", "reference")
    Config = FlareConfig

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
            common.check(rec, span=gen.event_id, signal="prob", threshold=cfg.threshold, compare="<", units=units,
                         fired=fired, unit="token", rule="any token of the look-ahead sentence below the threshold")
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
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question)
        text = ""
        for rnd in range(cfg.max_rounds):
            rec.step = rnd
            old_len = len(text)
            segments = prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=text)
            gen = common.generate(engine, rec, segments, max_new_tokens=cfg.max_length, purpose="draft")
            common.continuation(rec, gen, retrieval)
            found = self._reference_check(rec, gen)
            if found is None:
                text = prompts.join_text(text, gen.text)
                retrieval = None
            else:
                cut_token, query, masked = found
                ptext = common.cut(rec, gen, cut_token, reason="sentences before the unsure one are kept")
                hits, retrieval = common.search(rec, self.retriever, query, cfg.top_k, source="masked-sentence",
                                                masked=masked)
                segments = prompts.build_prompt(question, shots=shots, hits=hits,
                                                answer_so_far=prompts.join_text(text, ptext))
                regen = common.generate(engine, rec, segments, max_new_tokens=cfg.max_length, purpose="continuation")
                common.continuation(rec, regen, retrieval)
                text = prompts.join_text(text, ptext, regen.text)
            if common.reference_should_stop(engine, text, old_len, max_length=cfg.max_length):
                break
        return text, hits

    def _reference_check(self, rec: TraceRecorder, gen: Generation) -> tuple[int, str, list[str]] | None:
        offsets = gen.offsets()
        units: list[dict[str, Any]] = []
        found = None
        fired = None
        for s_idx, sent in enumerate(get_language().sentences(gen.text)):
            if "the answer is" in sent.text.lower():
                break
            idx = [i for i, start in enumerate(offsets) if sent.start_char <= start < sent.end_char]
            if not idx:
                continue
            unsure = [1.0 - gen.tokens[i].prob for i in idx]
            score = sum(unsure) / len(unsure)
            units.append({"text": sent.text, "value": score, "eligible": True, "sentence": s_idx,
                          "tokens": [idx[0], idx[-1] + 1]})
            if score > self.config.threshold and found is None:
                fired = len(units) - 1
                drop = [u > self.config.threshold for u in unsure]
                query = _masked([gen.tokens[i] for i in idx], drop)
                masked = [gen.tokens[i].text.strip() for i, d in zip(idx, drop, strict=True) if d]
                found = (idx[0], query, masked)
                rec.add("trigger", span=gen.event_id, token_index=idx[0], signal="mean(1-p)", value=score,
                        threshold=self.config.threshold, token=gen.tokens[idx[0]].text, sentence=s_idx)
        common.check(rec, span=gen.event_id, signal="mean(1-p)", threshold=self.config.threshold, compare=">",
                     units=units, fired=fired, unit="sentence",
                     rule="first sentence whose mean 1 - p over its tokens exceeds the threshold")
        return found
