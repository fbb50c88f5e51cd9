"""The decision rules of the SEAKR authors' code, as pure functions of what the model produced.

SEAKR's ``reference`` variant decides what ``MultiHopReasoner`` in the authors' ``SEAKR/reasoner.py``
decides (with ``SEAKR/dataset.py``'s prompt template and ``main_multihop.py``'s settings). That code's
details change decisions: which stop strings end a step, that the answer check comes before the
retrieval decision, that an empty step retrieves, how the sure words of a step are matched to its
tokens and which sentence's words survive, how the query is tagged, which candidate a stable sort
keeps, which call's U scores the passages' answer, who wins a tie. They are reproduced here rule
for rule and kept free of model calls, so a test can replay recorded outputs through an
independent implementation. docs/reference-departures.md lists each rule and every departure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from explorer.engine.language import Language

#: Stop strings of every call (``prepare_llm_input``).
BASE_STOPS = ("\n\n", "\nQuestion:", "\nContext")
#: What the model is told before every question, passages or not (``Dataset.__call__``).
INSTRUCTION = "Answer in the same format as before. \n"
#: Appended to a prompt whose continuation stated no answer (``read_all_steps``, ``read_all_docs``).
FORCE = " So the answer is "
#: Parts of speech ``_filter_words`` keeps (the adverb included) and the words it drops afterwards.
QUERY_POS = frozenset({"NOUN", "ADJ", "VERB", "PROPN", "NUM", "ADV"})
QUERY_DROP = ("thus", "answer", "is", "so")
#: ``main_multihop.py``'s defaults (its run scripts pass 7 steps).
MAX_TOKENS = 100
MAX_QUERY_TOKENS = 64

_ANSWER = re.compile(r"the answer is(?:\s*:\s*)?(.*?)[,.]", re.DOTALL)
_ANSWER_BEFORE = re.compile(r"[.?!]\s*([^?!]*?)\s+is the answer\b", re.DOTALL)
_NOT_ALNUM = re.compile(r"[^a-zA-Z0-9]")


# -- prompts and stops ----------------------------------------------------------------------------

def clean_question(question: str) -> str:
    """The question as the reasoner keeps it: every period replaced by a space."""
    return question.replace(".", " ")


def steps_text(steps: Sequence[str]) -> str:
    """The steps after ``Answer:``: each with its periods removed and one appended, joined by spaces.

    (The template writes ``c.replace('.', ' '.strip())``, which replaces a period with nothing.)
    """
    return " ".join(f"{s.replace('.', '')}." for s in steps)


def prompt_segments(question: str, shots: str, steps: Sequence[str] = (), docs: Sequence[str] = (),
                    force: bool = False) -> list[tuple[str, str]]:
    """The template's prompt as labelled segments: exemplars, ``Context: [1] ...``, instruction, question, steps.

    ``shots`` ends with the blank line that separates exemplars; ``force`` appends " So the answer is ".
    """
    segments: list[tuple[str, str]] = [("exemplars", shots)] if shots else []
    if docs:
        segments.append(("context", "Context: " + "\n".join(f"[{i}] {d}" for i, d in enumerate(docs, 1)) + "\n"))
    segments += [("instruction", INSTRUCTION + "Question: "), ("question", question), ("answer_label", "\nAnswer: ")]
    if steps:
        segments.append(("answer", steps_text(steps)))
    if force:
        segments.append(("answer", FORCE))
    return segments


def step_stops(has_steps: bool) -> tuple[str, ...]:
    """Stops of a step (and of a re-ranking context): a newline only once some step exists, and ". "."""
    return (*BASE_STOPS, *(("\n",) if has_steps else ()), ". ")


def read_steps_stops() -> tuple[str, ...]:
    """Stops of the answer from the steps (the steps are passages there, so no "\\n" from them; one added)."""
    return (*BASE_STOPS, "\n")


def read_docs_stops(force: bool) -> tuple[str, ...]:
    """Stops of the answer from the passages: no ". " (a final call), "\\n" added for the forced completion."""
    return (*BASE_STOPS, *(("\n",) if force else ()))


# -- the uncertainty as the reasoner reads it -----------------------------------------------------

def read_u(value: float | None) -> float:
    """``uncertainty.get("eigen_score", 0)``: a call with no score (no non-empty sample) reads as 0."""
    return 0.0 if value is None else float(value)


def direct_failed(text: str, u: float, delta: float) -> bool:
    """``answer_direct``: a step fails (and retrieval follows) when its text is empty or U > δ."""
    return text.strip() == "" or u > delta


# -- answers ------------------------------------------------------------------------------------------

def final_answer(text: str) -> str | None:
    """``_check_final_answer``: lower-cased text after "the answer is" up to "," or ".", else before "is the answer"."""
    if not text:
        return None
    low = text.lower()
    m = _ANSWER.search(low)
    if m:
        return m.group(1).strip()
    m = _ANSWER_BEFORE.search(low)
    return m.group(1).strip() if m else None


def filter_last_step(content: str, lang: Language) -> str:
    """``filter_last_step``: the step's spaCy sentences without answer sentences, joined by spaces ("" = drop it)."""
    doc = lang.doc(content.strip())
    kept = [s.text for s in doc.sents
            if "the answer is" not in s.text.lower() and "is the answer" not in s.text.lower()]
    return " ".join(kept)


def unusable(answer: str | None) -> bool:
    """``check_none_or_unknown``: no answer, or one that says "unknown" (an empty string is an answer)."""
    return answer is None or "unknown" in answer.lower()


def choose(step_answer: str | None, step_u: float, read_answer: str | None, read_u_: float) -> tuple[str, str]:
    """``compare_answer``: which answer wins ("steps" or "docs") and why; a tie goes to the passages' answer."""
    if unusable(step_answer):
        return "docs", "the answer from the steps is missing or unknown"
    if unusable(read_answer):
        return "steps", "the answer from the passages is missing or unknown"
    if step_u < read_u_:
        return "steps", f"the steps' context is less uncertain ({step_u:.3f} < {read_u_:.3f})"
    return "docs", f"the passages' context is not more uncertain ({read_u_:.3f} <= {step_u:.3f})"


# -- re-ranking ---------------------------------------------------------------------------------------

def rerank_order(candidates: Sequence[tuple[str, float]]) -> list[int]:
    """Candidates (greedy text, U read as above) in the kept order: stable sort by U, an empty text last."""
    return sorted(range(len(candidates)),
                  key=lambda i: candidates[i][1] if candidates[i][0].strip() else math.inf)


# -- the query ----------------------------------------------------------------------------------------

def _clean(text: str) -> str:
    return _NOT_ALNUM.sub("", text)


@dataclass
class QueryBuild:
    """The query and, per word of the last sentence, its tokens' 1 - p and why it was or was not kept."""

    query: str
    raw: str
    words: list[dict[str, Any]] = field(default_factory=list)
    fallback: bool = False


def word_tokens(content: str, pieces: Sequence[str], probs: Sequence[float],
                lang: Language) -> list[list[tuple[str, list[float]]]]:
    """``_restruct_tokens``: per spaCy sentence, its words with the probabilities of the tokens matched to them.

    Tokens are reduced to their ASCII letters and digits (empty ones dropped) and consumed in order:
    a token the rest of the word starts with belongs to it; a token that starts with the rest of
    the word merges the next spaCy token into the word; any other token is skipped.
    """
    tokens = [(c, p) for piece, p in zip(pieces, probs, strict=True) if (c := _clean(piece))]
    out: list[list[tuple[str, list[float]]]] = []
    t = 0
    for sentence in (s.text.strip() for s in lang.doc(content).sents):
        doc = list(lang.doc(sentence)) if sentence else []
        words: list[tuple[str, list[float]]] = []
        i = 0
        while i < len(doc):
            if not _clean(doc[i].text):
                i += 1
                continue
            full, rest, mine = doc[i].text, _clean(doc[i].text), []
            while rest and t < len(tokens):
                token, prob = tokens[t]
                if rest.startswith(token.strip()):
                    mine.append(prob)
                    rest = rest[len(token.strip()):]
                elif token.startswith(rest) and i + 1 < len(doc):
                    i += 1
                    full += doc[i].text
                    rest += _clean(doc[i].text)
                    continue
                t += 1
            words.append((full, mine))
            i += 1
        out.append(words)
    return out


def filter_words(text: str, lang: Language) -> str:
    """``_filter_words``: the tagged text's NOUN/ADJ/VERB/PROPN/NUM/ADV words, minus thus/answer/is/so."""
    kept = [t.text for t in lang.doc(text.strip()) if t.pos_ in QUERY_POS]
    return " ".join(w for w in kept if w not in QUERY_DROP)


def build_query(content: str, pieces: Sequence[str], probs: Sequence[float], question: str, last_step: str,
                threshold: float, lang: Language) -> QueryBuild:
    """``_retrieve``'s query: sure or grounded words of the step's LAST sentence, filtered; else the question's.

    A word is sure when the largest 1 - p of its tokens is at most ``threshold``, grounded when it
    occurs (case-sensitive substring) in the question or the previous step. Only the last
    sentence's words survive (the word list restarts with every sentence).
    """
    raw, words = "", []
    if content.strip():
        sure: list[str] = []
        for sentence in word_tokens(content, pieces, probs, lang):
            sure = []
            for word, word_probs in sentence:
                if not word_probs:
                    continue
                unsure = max(1.0 - p for p in word_probs)
                grounded = word in question or (bool(last_step) and word in last_step)
                keep = grounded or unsure <= threshold
                words.append({"text": word, "unsure": round(unsure, 6), "grounded": grounded,
                              "sure": unsure <= threshold, "kept": keep})
                if keep:
                    sure.append(word)
        raw = " ".join(sure)
    query = filter_words(raw, lang)
    if query.strip():
        return QueryBuild(query, raw, words)
    return QueryBuild(filter_words(question, lang), raw, words, fallback=True)
