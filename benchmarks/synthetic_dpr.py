"""A synthetic corpus in the DPR ``psgs_w100.tsv`` layout, for measuring the explorer at Wikipedia scale.

The real file (21,015,324 passages, about 13 GB) cannot ship with the project, so the scale
benchmark writes a look-alike of any size:

- **words** come from real text: the raw whitespace tokens of the pooled benchmark corpus
  (HotpotQA, MuSiQue, 2WikiMultihopQA, NQ and DPR paragraphs), drawn with their observed
  frequencies, which follow Zipf's law. A real 21M-passage Wikipedia has a far longer tail of rare
  words (names, numbers, foreign words) than a 15k-passage pool, so a share of the tokens
  (``TAIL_SHARE``) is drawn instead from a Zipf distribution over ``TAIL_WORDS`` pseudo-words
  (a pool word with a rank suffix): the vocabulary then grows with the corpus as a real one does.
- **lengths** follow the DPR cut: articles are cut into passages of exactly 100 words, the last
  passage of an article being shorter; an article has a geometric number of passages with DPR's
  mean (21,015,324 passages / ~3.2M articles, about 6.6).
- **titles** are real titles from the pool, shared by all passages of one article.
- **layout**: the header ``id<TAB>text<TAB>title``, ids ``1..N``, the text quoted the way DPR
  (and Python's csv) quote it.

Everything is drawn from one seeded generator, so a given (N, seed) always gives the same file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DPR_PASSAGES = 21_015_324
DPR_MEAN_PASSAGES_PER_ARTICLE = 6.6
PASSAGE_WORDS = 100
TAIL_SHARE = 0.05  # tokens drawn from the long tail of rare pseudo-words
TAIL_WORDS = 8_000_000
TAIL_EXPONENT = 1.1
BATCH = 20_000  # passages generated per numpy draw


@dataclass(frozen=True)
class WordSource:
    """Real words with their frequencies, and real titles (from the pooled benchmark corpus)."""

    words: list[str]
    cumulative: np.ndarray  # cumulative probabilities, for inverse-CDF draws
    titles: list[str]

    @classmethod
    def from_jsonl(cls, path: Path) -> WordSource:
        counts: Counter[str] = Counter()
        titles: dict[str, None] = {}
        with open(path, encoding="utf-8") as stream:
            for line in stream:
                record = json.loads(line)
                counts.update(record["text"].split())
                title = " ".join(str(record.get("title") or "").replace('"', "").split())
                if title:
                    titles[title] = None
        ranked = counts.most_common()
        words = [w.replace('"', "'") for w, _ in ranked]
        freq = np.array([c for _, c in ranked], dtype=np.float64)
        return cls(words=words, cumulative=np.cumsum(freq / freq.sum()), titles=list(titles))


def _tail_cumulative() -> np.ndarray:
    ranks = np.arange(1, TAIL_WORDS + 1, dtype=np.float64)
    weights = ranks ** -TAIL_EXPONENT
    return np.cumsum(weights / weights.sum())


def passages(source: WordSource, n: int, seed: int = 0) -> Iterator[tuple[int, str, str]]:
    """(id, title, text) of n synthetic passages, in file order."""
    rng = np.random.default_rng(seed)
    tail = _tail_cumulative()
    words = source.words
    head = len(words)
    produced = 0
    title, left = "", 0  # the current article's title and how many passages it still has
    while produced < n:
        count = min(BATCH, n - produced)
        draws = count * PASSAGE_WORDS
        head_ids = np.minimum(np.searchsorted(source.cumulative, rng.random(draws)), head - 1)
        in_tail = rng.random(draws) < TAIL_SHARE
        tail_ranks = np.minimum(np.searchsorted(tail, rng.random(int(in_tail.sum()))), TAIL_WORDS - 1)
        cut_points = rng.integers(10, PASSAGE_WORDS + 1, size=count)
        article_sizes = rng.geometric(1 / DPR_MEAN_PASSAGES_PER_ARTICLE, size=count)
        title_picks = rng.integers(0, len(source.titles), size=count)
        tokens = [words[i] for i in head_ids.tolist()]
        for at, rank in zip(np.flatnonzero(in_tail).tolist(), tail_ranks.tolist(), strict=True):
            tokens[at] = f"{words[rank % head]}{rank // head}" if rank >= head else words[rank]
        for i in range(count):
            if left == 0:
                title, left = source.titles[title_picks[i]], int(article_sizes[i])
            left -= 1
            size = PASSAGE_WORDS if left else int(cut_points[i])  # an article's last passage is shorter
            start = i * PASSAGE_WORDS
            produced += 1
            yield produced, title, " ".join(tokens[start:start + size])


def write_dpr_tsv(path: Path, source: WordSource, n: int, seed: int = 0, *, progress: bool = False) -> int:
    """Write n passages to ``path`` in the psgs_w100.tsv layout; returns the file size in bytes."""
    from tqdm import tqdm

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as out, \
            tqdm(total=n, desc=f"writing {path.name}", unit=" passages", disable=not progress, unit_scale=True) as bar:
        out.write("id\ttext\ttitle\n")
        lines: list[str] = []
        for pid, title, text in passages(source, n, seed):
            lines.append(f'{pid}\t"{text.replace(chr(34), chr(34) * 2)}"\t{title}\n')
            if len(lines) >= BATCH:
                out.write("".join(lines))
                bar.update(len(lines))
                lines = []
        out.write("".join(lines))
        bar.update(len(lines))
    return path.stat().st_size
