"""DR-RAG: two-stage retrieval, a pair classifier to choose passages, and ONE call to answer.

1. Stage 1: ``k1`` passages for the question (static-relevant).
2. Query-document concatenation: for each stage-1 passage d, search with q + d for ``k2``
   candidates (dynamic-relevant passages that q alone misses, such as the Green album's
   performer's partner, who never mentions Green).
3. Selection (``selection``): ``qdc`` fills up to ``k`` passages from the candidate lists;
   ``cfs`` keeps, per stage-1 passage, the first candidate the pair classifier accepts with it;
   ``cis`` takes the QDC passages and drops those whose every pair the classifier rejects.
4. One generation answers from the chosen passages.

The classifier is :class:`~explorer.methods.drrag.pair_classifier.PairClassifier`: the one shipped
with the explorer (``explorer/data/pair_classifier``), or one retrained by ``python -m explorer
train-classifier`` into the cache (which then takes precedence), or a folder named in
``classifier_path``. The ``selection`` event says which judge decided (``judge``) and, for the
classifier, which one (``judge_source``: origin, path, family, threshold, held-out F1). With
``judge=llm``, or when no usable classifier is found under ``judge=auto``, the model itself is asked,
per pair, whether the two passages together answer the question (the ``classifier`` events then
say ``judge: "llm"``); that costs an LLM call per pair, which is exactly what DR-RAG's small
classifier exists to avoid, so the trace says so in a note.

Trace: stage-1 ``query``/``retrieval`` (``stage: 1``); per stage-1 passage a ``query`` with
``source: "qdc"`` and ``anchor`` and its ``retrieval`` with ``stage: 2`` and ``candidates``; one
``classifier`` event per pair judged; one ``selection`` event with a reason per passage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from explorer.cache import KeyedCache
from explorer.config import param
from explorer.errors import ConfigError, ModelError
from explorer.methods import common, judge, prompts
from explorer.methods.base import Method, register
from explorer.methods.drrag.selection import CIS_FALLBACKS, Scorer, Selection, cfs_select, cis_select, qdc_select
from explorer.paths import portable_path
from explorer.retrieval.base import Hit, Passage
from explorer.trace import TraceRecorder, register_event_kind

register_event_kind(
    "classifier", ("pair", "probability", "accepted", "judge"),
    "a relevance-classifier call: pair [id_a, id_b] (for CFS the stage-1 passage first), probability, accepted "
    "(probability >= threshold) and judge: 'classifier' (the trained pair classifier) or 'llm' (the model asked; "
    "its generation event id is given)")

SELECTIONS = ("cfs", "cis", "qdc")
JUDGES = ("auto", "classifier", "llm")

# The LLM judge's prompt, with the project's own exemplars.
JUDGE_INSTRUCTION = ("Decide whether the two passages together give the facts needed to answer the question. "
                     "Answer yes or no.\n\n")
JUDGE_EXAMPLES = (
    ("In which country is the deepest lake in the world?",
     "Lake Baikal: Lake Baikal is a rift lake in southern Siberia and the deepest lake in the world.",
     "Siberia: Siberia is the vast northern region of Russia, from the Ural Mountains to the Pacific.", "yes"),
    ("Who founded the company that makes the Model T?",
     "Ford Model T: The Model T was an automobile produced by the Ford Motor Company from 1908 to 1927.",
     "Detroit: Detroit is the largest city of Michigan and the historic centre of the American car industry.", "no"),
)
JUDGE_LEAD = "Together they answer it:"


@dataclass
class DrRagConfig(common.BaseConfig):
    """DR-RAG's knobs. The paper reports k = 3, 4, 6 with k1 = k/2 (its appendix A.5)."""

    selection: str = param("cfs", choices=SELECTIONS,
                           help="cfs: classifier forward selection; cis: classifier inverse selection; "
                                "qdc: query-document concatenation alone (no classifier)")
    k: int = param(4, lo=1, hi=20, help="most passages given to the model (paper: 3, 4 or 6)")
    k1: int = param(2, lo=1, hi=20, help="stage 1: passages retrieved with the question alone (paper: k/2)")
    k2: int = param(5, lo=1, hi=50, help="stage 2: candidates retrieved for each question + passage query")
    judge: str = param("auto", choices=JUDGES,
                       help="who judges pairs: the trained classifier, the model itself (one LLM call per pair), "
                            "or auto (the classifier when one can be loaded, else the model)")
    classifier_path: str = param("", ui=False, help="a trained classifier folder (empty: the one retrained into the "
                                                    "cache, else the one shipped with the explorer)")
    threshold: float | None = param(None, lo=0.0, hi=1.0,
                                    help="accept a pair at this probability (empty: the classifier's own "
                                         "threshold; 0.5 for the model as judge)")
    cis_fallback: str = param("best-pair", choices=CIS_FALLBACKS,
                              help="when CIS rejects every pair: keep the most probable pair, or no passage")
    judge_passage_words: int = param(80, lo=10, hi=400, ui=False,
                                     help="the model as judge reads at most this many words of each passage")

    def check(self) -> None:
        if self.k1 > self.k:
            raise ConfigError(f"k1 = {self.k1} is more than k = {self.k}", where="DrRagConfig.k1",
                              fix="choose k1 <= k (the paper uses k1 = k/2)")


_classifiers: KeyedCache[Any] = KeyedCache("pair classifiers")


def load_classifier(path: str | Path | None = None) -> tuple[Any | None, Path]:
    """The pair classifier (loaded once per file version) and where it was looked for.

    Without ``path``: the one retrained into the cache, else the one shipped with the explorer."""
    from explorer.methods.drrag.pair_classifier import MANIFEST, PairClassifier

    source = Path(path).expanduser() if path else PairClassifier.default_source()[0]
    manifest = source / MANIFEST if source.is_dir() else source
    try:
        stat = manifest.stat()
    except OSError:
        return None, source
    model = _classifiers.get(str(manifest.resolve()), lambda: PairClassifier.load(source if path else None),
                             stamp=(stat.st_size, stat.st_mtime_ns))
    return model, source


def judge_prompt(question: str, a: Passage, b: Passage, words: int = 80) -> str:
    """Few-shot prompt asking the model whether two passages together answer the question."""
    shots = (f"Passage A: {pa}\nPassage B: {pb}\nQuestion: {q}\n{JUDGE_LEAD} {v}\n\n"
             for q, pa, pb, v in JUDGE_EXAMPLES)
    first, second = (judge.clip_words(p.as_context(), words) for p in (a, b))
    case = f"Passage A: {first}\nPassage B: {second}\nQuestion: {question.strip()}\n"
    return judge.few_shot(JUDGE_INSTRUCTION, shots, case, JUDGE_LEAD)


def yes_probability(top: list[tuple[str, float]], text: str) -> tuple[float, str]:
    """P(yes) / (P(yes) + P(no)) over the first answer token's top alternatives, and how it was read.

    When neither word is among them, the generated word decides (1 or 0); anything else is a
    rejection (0)."""
    p_yes = sum(p for t, p in top if t.strip().lower() == "yes")
    p_no = sum(p for t, p in top if t.strip().lower() == "no")
    if p_yes + p_no > 0:
        return p_yes / (p_yes + p_no), "yes/no probability of the first answer token"
    word = text.strip().lower().split()[0].strip(".,!") if text.strip() else ""
    if word in ("yes", "no"):
        return (1.0 if word == "yes" else 0.0), "the generated word (yes/no not among the top tokens)"
    return 0.0, "neither yes nor no was generated (counted as a rejection)"


@register
class DrRag(Method, name="drrag", title="DR-RAG (two-stage retrieval + pair classifier)", config=DrRagConfig):
    _judge_source: dict[str, Any] | None = None  # which judge decided, for the selection event

    def run(self, question: str, rec: TraceRecorder) -> None:
        cfg = self.config
        hits, selection_event = self.retrieve(question, rec)
        rec.step = 2
        segments = prompts.build_prompt(question, shots=common.shots(cfg, question), hits=hits)
        gen = common.generate(self.engine, rec, segments, max_new_tokens=cfg.max_length, purpose="answer",
                              meta={"selection": selection_event, "passages": [h.passage.id for h in hits]})
        common.finish(self.engine, rec, cfg, question, gen.text, hits)

    # -- retrieval and selection (no answer): also what the retrieval-metrics command runs ------------------
    def retrieve(self, question: str, rec: TraceRecorder) -> tuple[list[Hit], int]:
        """Both stages and the selection; returns the chosen hits and the id of the ``selection`` event."""
        cfg = self.config
        rec.step = 0
        stage1, first = common.search(rec, self.retriever, question, cfg.k1, source="question", stage=1)
        rec.amend(first, stage=1)
        stage1_ids = {h.passage.id for h in stage1}
        candidates: list[list[Hit]] = []
        for rank, hit in enumerate(stage1, start=1):
            query = prompts.join_text(question, prompts.passage_text(hit.passage))
            # The concatenated query finds its own passage (and other stage-1 passages) first, so
            # the search goes that much deeper to leave k2 candidates that are new.
            found, event = common.search(rec, self.retriever, query, cfg.k2 + len(stage1), source="qdc", stage=2,
                                         anchor=hit.passage.id, anchor_rank=rank,
                                         parts=[{"source": "original", "text": question},
                                                {"source": "passage", "text": prompts.passage_text(hit.passage),
                                                 "passage": hit.passage.id, "retrieval": first}])
            pool = [h for h in found if h.passage.id not in stage1_ids][: cfg.k2]
            rec.amend(event, stage=2, anchor=hit.passage.id, candidates=[h.passage.id for h in pool])
            candidates.append(pool)

        rec.step = 1
        judge_calls = 0
        if cfg.selection == "qdc":
            sel = qdc_select(stage1, candidates, cfg.k)
            judge = None
        else:
            scorer, judge = self._scorer(question, rec)
            if cfg.selection == "cfs":
                sel = cfs_select(stage1, candidates, cfg.k, scorer)
            else:
                sel = cis_select(qdc_select(stage1, candidates, cfg.k).picks, scorer, fallback=cfg.cis_fallback)
            judge_calls = len(sel.verdicts) if judge == "llm" else 0
        for note in sel.notes:
            rec.add("note", message=note, level="info")
        event = rec.add("selection", passage_ids=sel.ids, reason=_reason(sel), strategy=sel.strategy,
                        passages=[p.to_dict() for p in sel.picks], dropped=sel.dropped, judge=judge,
                        judge_source=self._judge_source if judge is not None else None,
                        pairs_judged=len(sel.verdicts), llm_judge_calls=judge_calls,
                        stage1=[h.passage.id for h in stage1],
                        stage2={h.passage.id: [c.passage.id for c in pool] for h, pool in zip(stage1, candidates,
                                                                                            strict=True)})
        return sel.hits, event.id

    def _scorer(self, question: str, rec: TraceRecorder) -> tuple[Scorer, str]:
        """The pair scorer for this run (classifier or LLM judge), recording a ``classifier`` event per call."""
        from explorer.methods.drrag.pair_classifier import StaleClassifier

        cfg = self.config
        model, where, unusable = None, None, None
        if cfg.judge != "llm":
            try:
                model, where = load_classifier(cfg.classifier_path or None)
            except StaleClassifier as exc:  # trained on other features: under auto, the model judges instead
                if cfg.judge == "classifier":
                    raise
                unusable = exc.message
        if model is None and cfg.judge == "classifier":
            raise ModelError(f"no trained pair classifier at {where}", where="DrRagConfig.judge",
                             fix="train one with: python -m explorer train-classifier --out FOLDER, or leave "
                                 "classifier_path empty for the shipped one (or set judge=auto or llm)")
        strategy = cfg.selection
        if model is not None:
            threshold = model.threshold if cfg.threshold is None else cfg.threshold
            info = model.describe()
            self._judge_source = {**info, "threshold": threshold}
            origin = {"shipped": "the classifier shipped with the explorer", "cache": "the classifier retrained into "
                      "the cache", "file": "the classifier"}.get(info["origin"], "the classifier")
            f1 = f", held-out F1 {info['held_out_f1']:.3f}" if isinstance(info.get("held_out_f1"), float) else ""
            rec.add("note", level="info", message=f"pairs are judged by {origin} at {portable_path(where)} "
                                                  f"({info['family']}, "
                                                  f"threshold {threshold:.2f}{f1})")

            def classify(a: Passage, b: Passage) -> tuple[float, bool]:
                with rec.phase("classifier") as timer:
                    probability = model.predict_proba(question, a, b)
                elapsed = timer.seconds
                accepted = probability >= threshold
                rec.add("classifier", pair=[a.id, b.id], probability=round(probability, 4), accepted=accepted,
                        judge="classifier", threshold=threshold, strategy=strategy, seconds=round(elapsed, 5))
                return probability, accepted

            return classify, "classifier"

        threshold = 0.5 if cfg.threshold is None else cfg.threshold
        self._judge_source = {"origin": "model", "threshold": threshold}
        reason = ("judge=llm was chosen" if cfg.judge == "llm" else
                  f"the pair classifier cannot be used ({unusable})" if unusable else
                  f"no trained pair classifier was found at {portable_path(where) if where else '?'} (train one "
                  "with: python -m explorer train-classifier)")
        rec.add("note", level="warning", message=f"{reason}; the model itself judges each pair, one LLM call per pair")

        def ask(a: Passage, b: Passage) -> tuple[float, bool]:
            gen = judge.ask(self.engine, judge_prompt(question, a, b, cfg.judge_passage_words), max_new_tokens=1,
                            purpose="judge", rec=rec, meta={"pair": [a.id, b.id]})
            top = gen.tokens[0].top if gen.tokens else []
            probability, how = yes_probability(top, gen.text)
            accepted = probability >= threshold
            rec.add("classifier", pair=[a.id, b.id], probability=round(probability, 4), accepted=accepted,
                    judge="llm", threshold=threshold, strategy=strategy, generation=gen.event_id, read=how)
            return probability, accepted

        return ask, "llm"


def _reason(sel: Selection) -> str:
    n = len(sel.picks)
    if sel.strategy == "qdc":
        return f"QDC: the stage-1 passages, then the first new stage-2 candidate of each in turn ({n} passages)"
    if sel.strategy == "cfs":
        return (f"CFS: the stage-1 passages, plus for each the first stage-2 candidate accepted as its pair "
                f"({n} passages; {len(sel.verdicts)} pairs judged)")
    return (f"CIS: the QDC passages minus those whose every pair was rejected ({n} kept, {len(sel.dropped)} dropped; "
            f"{len(sel.verdicts)} pairs judged)")
