"""DRAGIN: retrieve when a content token is both uncertain and attended to (RIND); query with what it attends to (QFS).

Two variants, because the paper's equations and the authors' code differ (methods.md):

* ``paper``: token-level RIND = entropy x amax x content, amax from later tokens' last-layer
  attention in the same span; retrieval fires at the first token over θ, the output is cut
  right before it, QFS reads that token's attention over the question and the text so far, and
  generation resumes from the cut with the new passages (which replace the old).
* ``reference``: chunks of ``max_length`` tokens, a second attention pass over the chunk alone,
  word-level scores normalised per spaCy sentence, the content-word filter after the threshold,
  the cut at the START of the flagged sentence, the "real words" QFS, and only the first
  sentence kept after each retrieval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from explorer.config import param
from explorer.engine.generation import Generation
from explorer.engine.language import CONTENT_POS, get_language
from explorer.engine.signals import aggregate, merge_words
from explorer.methods import common, prompts, qfs
from explorer.methods.base import Method, register
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


@register
class Dragin(Method):
    name = "dragin"
    title = "DRAGIN (RIND + QFS)"
    variants = ("paper", "reference")
    Config = DraginConfig

    def run(self, question: str, rec: TraceRecorder) -> None:
        if self.variant == "paper":
            text, hits = self._run_paper(question, rec)
        else:
            text, hits = self._run_reference(question, rec)
        common.finish(self.engine, rec, self.config, question, text, hits)

    # -- paper ----------------------------------------------------------------------------------
    def _run_paper(self, question: str, rec: TraceRecorder) -> tuple[str, list[Hit]]:
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question)
        text, hits, retrieval = "", [], None
        for budget in common.budgeted_rounds(rec, engine, cfg, lambda: text):  # noqa: B023 (read each round)
            segments = prompts.build_prompt(question, shots=shots, hits=hits, answer_so_far=text)
            gen = common.generate(engine, rec, segments, max_new_tokens=budget, purpose="draft", attention=True)
            common.continuation(rec, gen, retrieval)
            # Right after a retrieval the continuation must keep at least one token, or a trigger on
            # its first token would loop forever.
            start = 1 if retrieval is not None else 0
            fired = self._paper_check(rec, gen, start)
            if fired is None:
                text = prompts.join_text(text, gen.text)
                if prompts.has_answer(text) or gen.stopped_by != "max_tokens":
                    break
                retrieval = None
                continue
            token = gen.tokens[fired]
            rec.add("trigger", span=gen.event_id, token_index=fired, signal="rind", value=token.rind,
                    threshold=cfg.threshold, token=token.text, entropy=token.entropy, amax=token.amax)
            kept = common.cut(rec, gen, fired, reason="truncated before the token that fired retrieval")
            text = prompts.join_text(text, kept) if kept.strip() else text
            result = qfs.paper_query(gen, fired, cfg.top_n, skip_stopwords=cfg.skip_stopwords)
            hits, retrieval = common.search(rec, self.retriever, result.query, cfg.top_k, source="qfs",
                                            trigger_token=token.text, **result.details())
        return text, hits

    def _paper_check(self, rec: TraceRecorder, gen: Generation, start: int) -> int | None:
        threshold = self.config.threshold
        units = [{"text": t.text, "value": t.rind, "eligible": t.content and i >= start, "entropy": t.entropy,
                  "amax": t.amax} for i, t in enumerate(gen.tokens)]
        fired = next((i for i, u in enumerate(units)
                      if u["eligible"] and u["value"] is not None and u["value"] > threshold), None)
        common.check(rec, span=gen.event_id, signal="rind", threshold=threshold, compare=">", units=units,
                     fired=fired, rule="first content token with entropy x amax over the threshold", unit="token")
        return fired

    # -- reference --------------------------------------------------------------------------------
    def _run_reference(self, question: str, rec: TraceRecorder) -> tuple[str, list[Hit]]:
        cfg, engine = self.config, self.engine
        shots = common.shots(cfg, question)
        text, hits = "", []
        for rnd in range(cfg.max_rounds):
            rec.step = rnd
            old_len = len(text)
            segments = prompts.build_prompt(question, shots=shots, answer_so_far=text)
            gen = common.generate(engine, rec, segments, max_new_tokens=cfg.max_length, purpose="draft")
            flagged = self._reference_check(rec, gen)
            if flagged is None:
                text = prompts.join_text(text, gen.text)
            else:
                sentence_index, sentence_words, hit_flags, cut_token = flagged
                ptext = common.cut(rec, gen, cut_token, reason="truncated at the start of the flagged sentence")
                result = qfs.reference_query(engine, prompts.join_text(question, text, ptext), sentence_words,
                                             hit_flags, cfg.top_n, max_query_tokens=cfg.max_query_tokens)
                rec.costs.forward_passes += 1
                if result.note:
                    rec.add("note", message=result.note, level="defect")
                hits, retrieval = common.search(rec, self.retriever, result.query, cfg.top_k, source="qfs-reference",
                                                sentence=sentence_index, **result.details())
                segments = prompts.build_prompt(question, shots=shots, hits=hits,
                                                answer_so_far=prompts.join_text(text, ptext))
                regen = common.generate(engine, rec, segments, max_new_tokens=cfg.max_length, purpose="continuation")
                common.continuation(rec, regen, retrieval)
                first = common.keep_first_sentence(rec, regen)
                text = prompts.join_text(text, ptext, first)
            if common.reference_should_stop(engine, text, old_len, max_length=cfg.max_length):
                break
        return text, hits

    def _reference_check(self, rec: TraceRecorder, gen: Generation) -> tuple[int, list[str], list[bool], int] | None:
        """Word scores per sentence; returns (sentence index, its words, flags after the content filter, cut token)."""
        if not gen.ids:
            return None
        heads = self.engine.attention_matrix(gen.ids, per_head=True, rec=rec)  # (h, q, k) over the chunk only
        token_amax = heads.max(dim=1).values.mean(dim=0).tolist()  # max over queries, then mean over heads
        words = merge_words(gen.token_texts)
        word_attn = aggregate(token_amax, words, "sum")
        word_entropy = aggregate([t.entropy for t in gen.tokens], words, "mean")
        offsets = gen.offsets()
        lang = get_language()
        units: list[dict[str, Any]] = []
        fired: int | None = None
        result = None
        for s_idx, sent in enumerate(lang.sentences(gen.text)):
            in_sent = [i for i, w in enumerate(words) if sent.start_char <= offsets[w.start] < sent.end_char]
            if not in_sent:
                continue
            if "the answer is" in sent.text.lower():
                break
            total = sum(word_attn[i] for i in in_sent) or 1.0
            scores = [word_attn[i] / total * len(in_sent) * word_entropy[i] for i in in_sent]
            over = [v > self.config.threshold for v in scores]
            real = {t.text for t in lang.pos_tags(sent.text) if t.pos in CONTENT_POS}
            content = [any(r in words[i].text for r in real) for i in in_sent]
            for k, i in enumerate(in_sent):
                units.append({"text": words[i].text, "value": scores[k], "sentence": s_idx, "content": content[k],
                              "attention": word_attn[i], "entropy": word_entropy[i], "eligible": True,
                              "tokens": [words[i].start, words[i].end]})
            if any(over) and fired is None:
                fired = len(units) - len(in_sent) + over.index(True)
                flags = [o and c for o, c in zip(over, content, strict=True)]
                if not any(flags):
                    rec.add("note", level="defect",
                            message=f"sentence {s_idx} fired, but every word over the threshold is a non-content "
                                    "word; the reference's filter runs only after the threshold test")
                result = (s_idx, [words[i].text for i in in_sent], flags, words[in_sent[0]].start)
        common.check(rec, span=gen.event_id, signal="rind-reference", threshold=self.config.threshold, compare=">",
                     units=units, fired=fired, unit="word",
                     rule="per sentence: word attention (sum of token amax, normalised to mean 1) x word entropy; "
                          "the first sentence with a word over the threshold is cut and retrieved for")
        if result is not None and fired is not None:
            unit = units[fired]
            first_token = unit["tokens"][0]
            rec.add("trigger", span=gen.event_id, token_index=first_token, signal="rind-reference",
                    value=unit["value"], threshold=self.config.threshold, token=gen.tokens[first_token].text,
                    word=unit["text"], sentence=result[0])
        return result
