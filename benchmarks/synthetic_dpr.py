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


class _Vocabulary:
    """Every word a token can be, as one byte blob of ``word + " "`` entries: the pool's words by rank,
    then the tail's pseudo-words (a pool word with its rank's quotient), indexed head + tail rank."""

    def __init__(self, words: list[str]) -> None:
        head = len(words)
        tail = [f"{words[r % head]}{r // head}" if r >= head else "" for r in range(TAIL_WORDS)]
        encoded = [w.encode("utf-8") + b" " for w in words] + [t.encode("utf-8") + b" " for t in tail]
        self.lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        self.blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.head = head


def _batches(source: WordSource, n: int, seed: int, skip: int = 0):
    """Per batch of BATCH passages: (first id, unified token ids, passage sizes, titles), in file order.
    The first ``skip`` batches are drawn (to keep the random stream) but not returned."""
    rng = np.random.default_rng(seed)
    tail = _tail_cumulative()
    head = len(source.words)
    produced, batch = 0, 0
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
        sizes = np.empty(count, dtype=np.int64)
        titles = []
        for i in range(count):
            if left == 0:
                title, left = source.titles[title_picks[i]], int(article_sizes[i])
            left -= 1
            sizes[i] = PASSAGE_WORDS if left else int(cut_points[i])  # an article's last passage is shorter
            titles.append(title)
        if batch >= skip:
            ids = head_ids.astype(np.int64)
            ids[in_tail] = np.where(tail_ranks >= head, head + tail_ranks, tail_ranks)
            yield produced + 1, ids, sizes, titles
        produced += count
        batch += 1


def _lines(vocab: _Vocabulary, first: int, ids: np.ndarray, sizes: np.ndarray, titles: list[str]) -> bytes:
    """The TSV lines of one batch, the words gathered with numpy (no string per word)."""
    count = len(sizes)
    keep = (np.arange(PASSAGE_WORDS)[None, :] < sizes[:, None]).ravel()
    chosen = ids[keep]
    lengths = vocab.lengths[chosen]
    ends = np.cumsum(lengths)
    starts_out = ends - lengths
    index = np.repeat(vocab.offsets[chosen] - starts_out, lengths) + np.arange(int(ends[-1]))
    text = vocab.blob[index].tobytes()
    bounds = np.concatenate([[0], ends[np.cumsum(sizes) - 1]])  # byte end of each passage (with its space)
    out = []
    for i in range(count):
        out.append(b"%d\t\"%s\"\t%s\n" % (first + i, text[bounds[i]:bounds[i + 1] - 1], titles[i].encode("utf-8")))
    return b"".join(out)


def write_dpr_tsv(path: Path, source: WordSource, n: int, seed: int = 0, *, progress: bool = False) -> int:
    """Write n passages to ``path`` in the psgs_w100.tsv layout; returns the file size in bytes.

    A file cut short (an interrupted run) is continued: its whole batches are kept, the random
    stream is replayed up to them, and the rest is written, so the result is the same file."""
    from tqdm import tqdm

    path.parent.mkdir(parents=True, exist_ok=True)
    skip, keep_bytes = _whole_batches(path, n)
    vocab = _Vocabulary(source.words)
    with open(path, "ab") as out, tqdm(total=n, initial=skip * BATCH, desc=f"writing {path.name}",
                                       unit=" passages", disable=not progress, unit_scale=True) as bar:
        out.truncate(keep_bytes)
        out.seek(keep_bytes)
        if keep_bytes == 0:
            out.write(b"id\ttext\ttitle\n")
        for first, ids, sizes, titles in _batches(source, n, seed, skip):
            out.write(_lines(vocab, first, ids, sizes, titles))
            bar.update(len(sizes))
    return path.stat().st_size


def _whole_batches(path: Path, n: int) -> tuple[int, int]:
    """(whole batches already in the file, bytes they end at): the header and every BATCH lines after it."""
    if not path.is_file():
        return 0, 0
    batches, lines, position, header_end = 0, -1, 0, 0
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 24), b""):
            at = 0
            while True:
                found = block.find(b"\n", at)
                if found < 0:
                    break
                lines += 1
                if lines == 0:
                    header_end = position + found + 1
                elif lines % BATCH == 0 and lines // BATCH * BATCH <= n:
                    batches, header_end = lines // BATCH, position + found + 1
                at = found + 1
            position += len(block)
    return batches, header_end if lines >= 0 else 0


def passages(source: WordSource, n: int, seed: int = 0) -> Iterator[tuple[int, str, str]]:
    """(id, title, text) of n synthetic passages, in file order (the same passages the file holds)."""
    vocab = _Vocabulary(source.words)
    for first, ids, sizes, titles in _batches(source, n, seed):
        for line in _lines(vocab, first, ids, sizes, titles).decode("utf-8").splitlines():
            pid, text, title = line.split("\t")
            yield int(pid), title, text[1:-1]
