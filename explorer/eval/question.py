"""One benchmark question, whatever file it came from: the record every loader produces."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Question:
    """One benchmark question: answers hold the main answer first, then accepted aliases.

    ``dataset`` is the name the question is filed under (a benchmark name, or the label of a
    user's file), which is what evaluations, reports and the store key it by.
    """

    id: str
    question: str
    answers: list[str]
    type: str
    dataset: str
    gold_passages: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def answer(self) -> str:
        return self.answers[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def gold(self) -> dict[str, Any]:
        """What a trace records about the right answer (``trace.gold``), the same from the app and from eval."""
        return {"dataset": self.dataset, "id": self.id, "type": self.type, "answers": list(self.answers),
                "gold_passages": list(self.gold_passages)}
