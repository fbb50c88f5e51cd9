"""An independent oracle of the SEAKR authors' reasoner, for differential tests and benchmarks.

It follows ``MultiHopReasoner`` (the SEAKR repository's ``SEAKR/reasoner.py``), its prompt
template (``SEAKR/dataset.py``) and the uncertainty the patched vLLM's engine attaches to a call
(``compute_uncertainty`` in ``vllm/engine/llm_engine.py``), written from that code in its own terms:
strings, spaCy loaded by itself, numpy. It shares no code with ``explorer.methods``.

Where the authors call their LLM, the oracle takes the next call the engine recorded during a run
of the reference variant (:func:`recorder`): it first checks that the engine was given exactly the
prompt and the stop strings the authors' loop would build at that point, then reads that call's
greedy text, greedy tokens and the non-empty samples' end states. So every step, retrieval, query,
re-ranking and final choice of the oracle is decided from the same model outputs as the method's;
a disagreement shows up as a different decision or a different next prompt.

Deliberate differences, the project's documented departures: the exemplars are the project's, a
passage is written ``title: text``, the retriever is the project's BM25, and the Gram
log-determinant is taken in float64 (vLLM's runs in float32 on the GPU).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.reference_oracle import nlp, truncate_query


@dataclass
class Call:
    """One recorded LLM call: its prompt and stops, the greedy output, the non-empty samples' texts and states."""

    prompt: str
    stops: tuple[str, ...]
    greedy_text: str
    pieces: list[str]
    probs: list[float]
    samples: list[tuple[str, Any]] | None  # None: a greedy-only call


@contextlib.contextmanager
def recorder(engine: Any) -> Iterator[list[Call]]:
    """Record every sampled measurement and every plain generation the engine runs, in order."""
    import explorer.engine.uncertainty as uncertainty

    calls: list[Call] = []
    real_sample, real_generate = uncertainty.sample, engine.generate

    def sample(eng: Any, prompt: Any, **kwargs: Any) -> Any:
        batch = real_sample(eng, prompt, **kwargs)
        g = batch.greedy
        calls.append(Call(batch.prompt, tuple(kwargs.get("stop_strings", ())), g.text, [t.text for t in g.tokens],
                          [t.prob for t in g.tokens], [(s.text, s.hidden) for s in batch.samples]))
        return batch

    def generate(prompt: Any, **kwargs: Any) -> Any:
        gen = real_generate(prompt, **kwargs)
        calls.append(Call(gen.prompt, tuple(kwargs.get("stop_strings", ())), gen.text, [t.text for t in gen.tokens],
                          [t.prob for t in gen.tokens], None))
        return gen

    uncertainty.sample = sample
    engine.generate = generate
    try:
        yield calls
    finally:
        uncertainty.sample = real_sample
        del engine.generate


class Diverged(AssertionError):
    """The engine was given another prompt or other stops than the authors' loop builds at this point."""


# -- the patched engine's uncertainty ----------------------------------------------------------------

def eigen_score(states: list[Any], alpha: float) -> float:
    z = np.stack([np.asarray(s.float().numpy() if hasattr(s, "float") else s, dtype=np.float64) for s in states])
    k, d = z.shape
    j_d = np.eye(d) - (1.0 / d) * np.ones((d, d))
    sigma = z @ j_d @ z.T
    _sign, logdet = np.linalg.slogdet(sigma + alpha * np.eye(k))
    return float(logdet / k)


@dataclass
class Output:
    greedy: str
    pieces: list[str]
    probs: list[float]
    eigen: float


# -- the reasoner -----------------------------------------------------------------------------------

@dataclass
class Step:
    content: str
    failed: bool = False
    score: float = 0.0
    pieces: list[str] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)


def check_final_answer(output_text: str) -> str | None:
    if not output_text:
        return None
    match = re.search(r"the answer is(?:\s*:\s*)?(.*?)[,.]", output_text.lower(), re.DOTALL)
    if match:
        return match.group(1).strip()
    match = re.search(r"[.?!]\s*([^?!]*?)\s+is the answer\b", output_text.lower(), re.DOTALL)
    if match:
        return match.group(1).strip()
    return None


def remove_special_characters(text: str) -> str:
    return re.sub(re.compile(r"[^a-zA-Z0-9]"), "", text)


class Reasoner:
    """``MultiHopReasoner`` with its LLM replaced by the recorded calls and its retriever by ``search``."""

    def __init__(self, question: str, prefix: str, calls: list[Call], search: Any, tokenizer: Any, *,
                 eigen_threshold: float, prob_threshold: float, alpha: float) -> None:
        self.question = question.replace(".", " ")
        self.prefix = prefix  # the exemplars, as dataset.prefix + "\n\n"
        self.calls, self.search, self.tokenizer = list(calls), search, tokenizer
        self.eigen_threshold, self.prob_threshold, self.alpha = eigen_threshold, prob_threshold, alpha
        self.running_steps: list[Step] = []
        self.searched_queries: set[str] = set()
        self.doc_id_list: list[str] = []
        self.docs: list[str] = []
        self.decisions: list[tuple[str, Any]] = []

    # dataset.__call__ and prepare_llm_input
    def template(self, cot_steps: list[str] | None, docs: list[str] | None) -> str:
        input_prompt = f"Answer in the same format as before. \nQuestion: {self.question}\nAnswer: "
        if cot_steps:
            input_prompt += " ".join([f"{c.replace('.', ' '.strip())}." for c in cot_steps])
        if docs:
            docs_text = "Context: " + "\n".join([f"[{i + 1}] {doc}" for i, doc in enumerate(docs)])
            input_prompt = f"{docs_text}\n{input_prompt}"
        return self.prefix + input_prompt

    def prepare(self, cot_step: list[Step] | None = None, docs: list[str] | None = None,
                is_final: bool = False) -> tuple[str, list[str]]:
        stop_tokens = ["\n\n", "\nQuestion:", "\nContext"]
        contents = None
        if cot_step:
            contents = [c.content for c in cot_step]
            stop_tokens += ["\n"]
        if not is_final:
            stop_tokens += [". "]
        return self.template(contents, docs), stop_tokens

    def call_llm(self, prompt: str, stop_tokens: list[str]) -> Output:
        if not self.calls:
            raise Diverged(f"the authors' loop makes another call, the engine made none: {prompt[-200:]!r}")
        call = self.calls.pop(0)
        if call.prompt != prompt:
            raise Diverged(f"prompt differs:\n engine: {call.prompt[-300:]!r}\n oracle: {prompt[-300:]!r}")
        if set(call.stops) != set(stop_tokens):
            raise Diverged(f"stops differ: engine {call.stops}, oracle {stop_tokens}")
        eigen = 0.0  # uncertainty.get("eigen_score", 0)
        if call.samples is not None:
            valid = [state for text, state in call.samples if text.strip()]
            if valid:
                eigen = eigen_score(valid, self.alpha)
        return Output(call.greedy_text, call.pieces, call.probs, eigen)

    # query
    def restruct_tokens(self, step: Step) -> list[list[dict[str, Any]]]:
        sentences = [sent.text.strip() for sent in nlp()(step.content).sents]
        cleaned = []
        for piece, prob in zip(step.pieces, step.probs, strict=True):
            c = remove_special_characters(piece)
            if c:
                cleaned.append((c, prob))
        reconstructed, token_idx = [], 0
        for sentence in sentences:
            doc = nlp()(sentence)
            sentence_tokens, i_word = [], 0
            while i_word < len(doc):
                word = doc[i_word]
                if len(remove_special_characters(word.text)) == 0:
                    i_word += 1
                    continue
                full_word_text = word.text
                clean_word_text = remove_special_characters(word.text)
                word_tokens = []
                while clean_word_text and token_idx < len(cleaned):
                    token_str, prob = cleaned[token_idx]
                    if clean_word_text.startswith(token_str.strip()):
                        word_tokens.append(prob)
                        clean_word_text = clean_word_text[len(token_str.strip()):]
                    elif token_str.startswith(clean_word_text) and i_word + 1 < len(doc):
                        i_word += 1
                        full_word_text += doc[i_word].text
                        clean_word_text += remove_special_characters(doc[i_word].text)
                        continue
                    token_idx += 1
                sentence_tokens.append({"word": full_word_text, "tokens": word_tokens})
                i_word += 1
            reconstructed.append(sentence_tokens)
        if len(reconstructed[-1]) > 0 and len(reconstructed[-1][-1]["tokens"]) == 0:
            reconstructed[-1] = reconstructed[-1][:-1]
        return reconstructed

    def build_query(self, step: Step) -> str:
        sure_words: list[str] = []
        for sentence in self.restruct_tokens(step):
            sure_words = []
            for w in sentence:
                if len(w["tokens"]) == 0:
                    continue
                max_prob = np.max([1 - p for p in w["tokens"]])
                if w["word"] in self.question or (self.running_steps and w["word"] in self.running_steps[-1].content) \
                        or max_prob <= self.prob_threshold:
                    sure_words.append(w["word"])
        return " ".join(sure_words) if sure_words else ""

    @staticmethod
    def filter_words(text: str) -> str:
        doc = nlp()(text.strip())
        words = [w.text for w in doc if w.pos_ in {"NOUN", "ADJ", "VERB", "PROPN", "NUM", "ADV"}]
        return " ".join(w for w in words if w not in ["thus", "answer", "is", "so"])

    def retrieve(self, step: Step) -> tuple[str, list[Any]] | None:
        query = ""
        if step.content.strip():
            query = self.build_query(step)
        query = self.filter_words(query)
        if not query.strip():
            query = self.filter_words(self.question)
        if query in self.searched_queries:
            self.decisions.append(("end", "repeated query"))
            return None
        self.decisions.append(("query", query))
        self.searched_queries.add(query)
        return query, self.search(truncate_query(self.tokenizer, query, 64), 3)

    def rag(self) -> Step | None:
        last = self.running_steps.pop()
        found = self.retrieve(last)
        if found is None:
            return None
        _query, hits = found
        read = []
        for hit in hits:
            if hit.passage.id in self.doc_id_list:
                continue
            prompt, stops = self.prepare(self.running_steps, self.docs + [hit.passage.as_context()])
            read.append((hit, self.call_llm(prompt, stops)))
        if not read:
            self.decisions.append(("end", "no new passage"))
            return None
        read.sort(key=lambda item: item[1].eigen if item[1].greedy.strip() else float("inf"))
        hit, best = read[0]
        self.decisions.append(("kept", hit.passage.id))
        self.doc_id_list.append(hit.passage.id)
        self.docs.append(hit.passage.as_context())
        return Step(best.greedy, score=best.eigen)

    def answer_direct(self) -> Step:
        prompt, stops = self.prepare(self.running_steps, self.docs)
        out = self.call_llm(prompt, stops)
        step = Step(out.greedy, score=out.eigen, pieces=out.pieces, probs=out.probs)
        step.failed = step.content.strip() == "" or step.score > self.eigen_threshold
        return step

    def check_final_step(self) -> bool:
        return bool(check_final_answer(self.running_steps[-1].content))

    def filter_last_step(self) -> None:
        doc = nlp()(self.running_steps[-1].content.strip())
        kept = [s.text for s in doc.sents
                if "the answer is" not in s.text.lower() and "is the answer" not in s.text.lower()]
        joined = " ".join(kept)
        if len(joined.strip()) == 0:
            self.running_steps = self.running_steps[:-1]
        else:
            self.running_steps[-1].content = joined

    def read_all_steps(self) -> None:
        if self.running_steps:  # the authors' code raises IndexError here (the project's departure: go on)
            self.filter_last_step()
        prompt, stops = self.prepare(docs=[s.content for s in self.running_steps])
        stops.append("\n")
        stops.remove(". ")
        out = self.call_llm(prompt, stops)
        answer = check_final_answer(out.greedy)
        if not answer:
            answer = self.call_llm(prompt + " So the answer is ", stops).greedy
        self.final_step_answer, self.final_step_score = answer, out.eigen

    def read_all_docs(self) -> None:
        prompt, stops = self.prepare(docs=self.docs, is_final=True)
        out = self.call_llm(prompt, stops)
        answer = check_final_answer(out.greedy)
        if answer is None:
            stops.append("\n")
            out = self.call_llm(prompt + " So the answer is ", stops)
            answer = out.greedy
        self.final_read_answer, self.final_read_answer_score = answer, out.eigen

    def compare_answer(self) -> str:
        def none_or_unknown(answer: str | None) -> bool:
            return answer is None or "unknown" in answer.lower()

        if none_or_unknown(self.final_step_answer):
            return "knowledge"
        if none_or_unknown(self.final_read_answer):
            return "rationales"
        return "rationales" if self.final_step_score < self.final_read_answer_score else "knowledge"

    def solve(self, max_reasoning_steps: int, max_docs: int) -> list[tuple[str, Any]]:
        while True:
            step = self.answer_direct()
            self.running_steps.append(step)
            if self.check_final_step():
                self.decisions.append(("retrieve", False))
                break
            self.decisions.append(("retrieve", step.failed))
            if step.failed:
                rag_step = self.rag()
                if rag_step is None:
                    break
                self.running_steps.append(rag_step)
            if self.check_final_step():
                break
            if len(self.running_steps) >= max_reasoning_steps or len(self.docs) >= max_docs:
                break
        self.read_all_steps()
        self.read_all_docs()
        self.decisions.append(("final", self.compare_answer()))
        if self.calls:
            raise Diverged(f"the engine made {len(self.calls)} call(s) the authors' loop does not make")
        return self.decisions


def trace_decisions(trace: Any) -> list[tuple[str, Any]]:
    """The same decisions as the method recorded them: per step check, query, kept passage, final choice."""
    out: list[tuple[str, Any]] = []
    for e in trace.events:
        p = e.payload
        if e.kind == "check" and p.get("unit") == "step":
            out.append(("retrieve", p["fired"] is not None))
        elif e.kind == "query":
            out.append(("query", p.get("filtered", p["text"])))
        elif e.kind == "rerank":
            out.append(("kept", p["chosen"]))
        elif e.kind == "choice":
            out.append(("final", p["chosen"]))
        elif e.kind == "note" and "was searched before" in p["message"]:
            out.append(("end", "repeated query"))
        elif e.kind == "note" and "brought no new passage" in p["message"]:
            out.append(("end", "no new passage"))
    return out


def agreement(ours: list[tuple[str, Any]], theirs: list[tuple[str, Any]]) -> dict[str, list[int]]:
    """Per decision kind, [agreeing, compared]; decisions past the first disagreement count as disagreeing."""
    counts: dict[str, list[int]] = {}
    diverged = False
    for i in range(max(len(ours), len(theirs))):
        a = ours[i] if i < len(ours) else None
        b = theirs[i] if i < len(theirs) else None
        kind = (a or b)[0]  # type: ignore[index]
        same = not diverged and a == b
        diverged = diverged or not same
        c = counts.setdefault(kind, [0, 0])
        c[0] += int(same)
        c[1] += 1
    return counts
