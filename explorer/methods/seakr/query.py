"""SEAKR's search query: the greedy pseudo-rationale without the words the model was unsure of.

The pseudo-rationale is what the model would have written next without help; the words it was
sure of (or that it copied from the question or its previous step) say what the step is about,
and the unsure ones are the gaps retrieval should fill, so they are left out (methods.md: the
reference keeps a word when every token of it has 1 - p at most a threshold, 0.1, or when it
occurs in the question or the last step, and then keeps content words). Content words are judged
by spaCy on the whole pseudo-rationale, so each word is tagged in its sentence rather than alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from explorer.engine.generation import Generation
from explorer.engine.language import CONTENT_POS, get_language
from explorer.engine.signals import merge_words

_WORD = re.compile(r"\w+")
_EDGE_PUNCT = "\"'“”‘’()[]{}.,;:!?"


@dataclass
class SeakrQuery:
    """The query and, per pseudo-rationale word, why it was kept or dropped."""

    text: str
    words: list[dict[str, Any]] = field(default_factory=list)
    fallback: bool = False

    def details(self) -> dict[str, Any]:
        return {"words": self.words, "dropped": [w["text"] for w in self.words if not w["kept"]],
                "fallback_to_question": self.fallback}


def _parts(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def build_query(pseudo: Generation, question: str, last_step: str, threshold: float) -> SeakrQuery:
    """Words of ``pseudo`` that are sure (every token 1 - p <= threshold) or grounded, then content words only.

    If nothing survives, the question's content words are the query (as the reference does).
    """
    lang = get_language()
    known = set(_parts(question)) | set(_parts(last_step))
    tags = lang.pos_tags(pseudo.text)
    offsets = pseudo.offsets()
    words: list[dict[str, Any]] = []
    for w in merge_words(pseudo.token_texts):
        text = w.text.strip(_EDGE_PUNCT)
        if not text:
            continue
        start = offsets[w.start]
        end = offsets[w.end - 1] + len(pseudo.tokens[w.end - 1].text)
        unsure = max(1.0 - t.prob for t in pseudo.tokens[w.start:w.end])
        parts = _parts(text)
        grounded = bool(parts) and all(p in known for p in parts)
        content = any(t.pos in CONTENT_POS for t in tags if start <= t.start_char < end)
        sure = unsure <= threshold
        words.append({"text": text, "unsure": round(unsure, 6), "sure": sure, "grounded": grounded,
                      "content": content, "kept": (sure or grounded) and content, "tokens": [w.start, w.end]})
    kept = [w["text"] for w in words if w["kept"]]
    if kept:
        return SeakrQuery(" ".join(kept), words)
    return SeakrQuery(" ".join(lang.content_words(question)) or question, words, fallback=True)
