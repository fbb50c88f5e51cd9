"""Answer and retrieval metrics, as pure functions of strings and id lists.

Answer scoring follows the SQuAD / HotpotQA evaluation scripts the papers report with: answers are
normalised (lower case, punctuation and the articles a/an/the removed, whitespace collapsed), exact
match and token F1 take the best over all accepted aliases, and, as in HotpotQA's script, a yes/no
answer scores F1 0 against any different answer rather than partial overlap. StrategyQA is scored
by accuracy after mapping free text ("Yes.", "no, because ...", "True") to yes/no.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_YES = frozenset(("yes", "yeah", "yep", "true", "correct", "right", "affirmative"))
_NO = frozenset(("no", "nope", "false", "incorrect", "wrong", "negative"))
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation, drop articles, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _aliases(answers: str | Iterable[str]) -> list[str]:
    return [answers] if isinstance(answers, str) else [a for a in answers if isinstance(a, str)]


def exact_match(prediction: str, answers: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised alias, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in _aliases(answers)))


def contains_answer(prediction: str, answers: str | Iterable[str]) -> float:
    """1.0 when any normalised alias occurs in the normalised prediction as whole words (for long outputs)."""
    pred = f" {normalize_answer(prediction)} "
    return float(any(norm and f" {norm} " in pred for norm in (normalize_answer(a) for a in _aliases(answers))))


def _token_prf(prediction: str, answer: str) -> tuple[float, float, float]:
    pred, gold = normalize_answer(prediction), normalize_answer(answer)
    if (pred in _SPECIAL or gold in _SPECIAL) and pred != gold:
        return 0.0, 0.0, 0.0
    pred_tokens, gold_tokens = pred.split(), gold.split()
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return precision, recall, 2 * precision * recall / (precision + recall)


def token_scores(prediction: str, answers: str | Iterable[str]) -> dict[str, float]:
    """Token precision, recall and F1 against the alias with the best F1."""
    best = (0.0, 0.0, 0.0)
    for answer in _aliases(answers):
        scores = _token_prf(prediction, answer)
        if scores[2] > best[2]:
            best = scores
    return {"precision": best[0], "recall": best[1], "f1": best[2]}


def f1_score(prediction: str, answers: str | Iterable[str]) -> float:
    return token_scores(prediction, answers)["f1"]


def to_yes_no(text: str) -> str | None:
    """Free text as "yes", "no" or None.

    The first word decides ("Yes.", "No, because", "True"); failing that, a yes (or true) with no
    no (or false) anywhere, or the reverse ("The answer is yes"); otherwise None.
    """
    words = normalize_answer(text).split()
    if not words:
        return None
    if words[0] in _YES:
        return "yes"
    if words[0] in _NO:
        return "no"
    has_yes = any(w in ("yes", "true") for w in words)
    has_no = any(w in ("no", "false") for w in words)
    if has_yes != has_no:
        return "yes" if has_yes else "no"
    return None


def yes_no_accuracy(prediction: str, answers: str | Iterable[str]) -> float:
    """1.0 when the prediction maps to the same yes/no as the gold answer; an unmappable prediction scores 0."""
    gold = next((g for g in (to_yes_no(a) for a in _aliases(answers)) if g), None)
    if gold is None:
        raise ValueError(f"the gold answer {list(_aliases(answers))!r} is not yes or no")
    return float(to_yes_no(prediction) == gold)


def document_of(passage_id: str) -> str:
    """The document a passage id belongs to: ``doc#2`` -> ``doc``."""
    return passage_id.split("#", 1)[0]


def passage_recall(gold: Sequence[str], retrieved: Iterable[str], *, by_document: bool = False) -> float | None:
    """Share of gold passage ids among the retrieved ids; None when there is no gold to find.

    ``by_document`` counts a gold id as found when any piece of the same document was retrieved
    (useful when a long gold paragraph was cut into several passages).
    """
    wanted = {document_of(g) for g in gold} if by_document else set(gold)
    if not wanted:
        return None
    got = {document_of(r) for r in retrieved} if by_document else set(retrieved)
    return len(wanted & got) / len(wanted)


def answer_scores(prediction: str, answers: str | Iterable[str], *, yes_no: bool = False) -> dict[str, float]:
    """Everything reported per question: accuracy for yes/no datasets, else EM, F1, precision, recall, contains."""
    if yes_no:
        return {"accuracy": yes_no_accuracy(prediction, answers)}
    return {"em": exact_match(prediction, answers), **token_scores(prediction, answers),
            "contains": contains_answer(prediction, answers)}
