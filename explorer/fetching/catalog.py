"""The benchmark files the explorer knows how to fetch: where each lives, what it is, its licence.

Question sets come from the FlashRAG collection on the Hugging Face hub (one JSON-lines layout,
``{id, question, golden_answers, metadata}``, one folder per dataset); the Wikipedia corpus is
DPR's 100-word passage split, from DPR's own public download. A file is kept in the fetched-data
folder under the same relative path it has at its source (``hotpotqa/dev.jsonl``), so what a user
sees on the hub page is what they find on disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from explorer.paths import data_dirs, fetched_data_dir

FLASHRAG_REPO = "RUC-NLPIR/FlashRAG_datasets"
FLASHRAG_LICENCE = "CC BY-SA 4.0 (the FlashRAG collection, Jin et al. 2024, arXiv:2405.13576)"
DPR_URL = "https://dl.fbaipublicfiles.com/dpr/wikipedia_split/psgs_w100.tsv.gz"


@dataclass(frozen=True)
class DataFile:
    """One fetchable file: its name, its kind (questions or corpus), where it comes from and its terms."""

    name: str
    title: str
    kind: str  # "questions" or "corpus"
    path: str  # relative path, the same at the source and in the fetched-data folder
    licence: str
    source: str  # the original release (homepage), cited beside the file
    size: str  # what to expect, for the listing ("" when not known ahead)
    repo: str | None = None  # a Hugging Face dataset repository, or None for a plain URL
    url: str | None = None
    revision: str = "main"
    note: str = ""

    @property
    def origin(self) -> str:
        """Where the bytes come from, in words (the hub repository and path, or the URL)."""
        return f"huggingface.co/datasets/{self.repo} ({self.path})" if self.repo else str(self.url)

    def describe(self) -> str:
        """What ``data list`` and ``data fetch`` show before anything is downloaded."""
        size = f", {self.size}" if self.size else ""
        lines = [f"{self.name}: {self.title} ({self.kind}{size})", f"  from:    {self.origin}",
                 f"  licence: {self.licence}", f"  source:  {self.source}"]
        if self.repo:
            lines.append(f"  collection licence: {FLASHRAG_LICENCE}")
        if self.note:
            lines.append(f"  note:    {self.note}")
        return "\n".join(lines)


def _flashrag(name: str, title: str, path: str, licence: str, source: str, size: str, note: str = "") -> DataFile:
    return DataFile(name=name, title=title, kind="questions", path=path, licence=licence, source=source, size=size,
                    repo=FLASHRAG_REPO, note=note)


CATALOG: tuple[DataFile, ...] = (
    _flashrag("hotpotqa", "HotpotQA dev (distractor setting, 7,405 questions)", "hotpotqa/dev.jsonl",
              "CC BY-SA 4.0", "Yang et al. 2018, https://hotpotqa.github.io", ""),
    _flashrag("2wiki", "2WikiMultihopQA dev (12,576 questions)", "2wikimultihopqa/dev.jsonl",
              "Apache 2.0", "Ho et al. 2020, https://github.com/Alab-NII/2wikimultihop", "54.7 MB"),
    _flashrag("musique", "MuSiQue-Ans dev (2,417 questions)", "musique/dev.jsonl",
              "CC BY 4.0", "Trivedi et al. 2022, https://github.com/StonyBrookNLP/musique", "5.6 MB"),
    _flashrag("nq", "Natural Questions (NQ-open) test (3,610 questions)", "nq/test.jsonl",
              "CC BY-SA 3.0", "Kwiatkowski et al. 2019 / Lee et al. 2019, https://ai.google.com/research/NaturalQuestions",
              "0.5 MB"),
    _flashrag("triviaqa", "TriviaQA (unfiltered, open-domain) test (11,313 questions)", "triviaqa/test.jsonl",
              "Apache 2.0", "Joshi et al. 2017, https://nlp.cs.washington.edu/triviaqa/", "4.8 MB"),
    _flashrag("popqa", "PopQA (14,267 questions)", "popqa/test.jsonl",
              "MIT", "Mallen et al. 2023, https://github.com/AlexTMallen/adaptive-retrieval", ""),
    _flashrag("strategyqa", "StrategyQA yes/no questions (the collection ships the train split)",
              "strategyqa/train.jsonl", "MIT", "Geva et al. 2021, https://allenai.org/data/strategyqa", "1.9 MB"),
    _flashrag("bamboogle", "Bamboogle (125 questions)", "bamboogle/test.jsonl",
              "MIT", "Press et al. 2023, https://github.com/ofirpress/self-ask", ""),
    DataFile(name="wikipedia", title="Wikipedia (Dec. 2018) in 21,015,324 passages of 100 words, DPR's split",
             kind="corpus", path="wikipedia/psgs_w100.tsv.gz",
             licence="CC BY-SA 3.0 (Wikipedia text); DPR's release is under CC BY-NC 4.0",
             source="Karpukhin et al. 2020, https://github.com/facebookresearch/DPR",
             size="several GB (13 GB unpacked)",
             url=DPR_URL, note="indexing it takes hours and tens of GB: `python -m explorer corpus index wikipedia`"),
)
ALIASES = {"hotpot": "hotpotqa", "2wikimultihopqa": "2wiki", "nq-open": "nq", "nq_open": "nq",
           "strategy": "strategyqa", "dpr": "wikipedia", "psgs_w100": "wikipedia", "wiki": "wikipedia"}


def names() -> list[str]:
    return [entry.name for entry in CATALOG]


def entry(name: str) -> DataFile | None:
    """The catalogue entry for any accepted spelling of its name, or None."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    return next((e for e in CATALOG if e.name == key), None)


def fetched_path(item: DataFile) -> Path:
    """Where ``data fetch`` puts (or put) the file."""
    return fetched_data_dir() / item.path


def find_file(candidates: Iterable[str], roots: Iterable[Path] | None = None) -> Path | None:
    """The first of ``candidates`` (relative paths) present in the data folders, searched folder by folder."""
    wanted = list(candidates)
    for root in roots if roots is not None else data_dirs():
        for rel in wanted:
            path = Path(root) / rel
            if path.is_file():
                return path
    return None


def fetch_hint(name: str) -> str:
    """How to get a catalogue file: the command that fetches it."""
    return f"fetch it with `python -m explorer data fetch {name}`"
