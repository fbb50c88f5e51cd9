"""The retrieval interface every backend implements.

Methods only ever call :meth:`Retriever.search`, so a BM25 index in memory, an Elasticsearch /
OpenSearch cluster or a dense index can stand behind the same callers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Passage:
    """One retrievable unit: at most ~100 words of text with the title of its document."""

    id: str
    title: str
    text: str

    def as_context(self) -> str:
        """The passage as it is shown to the model: title, then text."""
        return f"{self.title}: {self.text}" if self.title else self.text


@dataclass(frozen=True)
class Hit:
    """A passage returned for a query, with the engine's score and its 1-based rank."""

    passage: Passage
    score: float
    rank: int

    def to_dict(self) -> dict:
        return {**asdict(self.passage), "score": float(self.score), "rank": self.rank}

    @classmethod
    def from_dict(cls, d: dict) -> Hit:
        """A hit as :meth:`to_dict` wrote it (a trace's retrieval event)."""
        return cls(Passage(str(d.get("id", "")), str(d.get("title") or ""), str(d.get("text") or "")),
                   float(d.get("score") or 0.0), int(d.get("rank") or 0))


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the top-k passages for a text query."""

    name: str

    def search(self, query: str, k: int) -> list[Hit]:
        """The k best passages for ``query``, best first (fewer if the corpus is smaller)."""
        ...

    def __len__(self) -> int:
        """Number of passages searchable."""
        ...
