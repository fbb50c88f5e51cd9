"""Damaged and edited corpus files, written here: lines a quote joins are named, bad bytes are placed on their
line, an overlong row and a NUL byte are reported, the disk check covers the whole build, a flipped byte in a
store or index file is refused when it is opened, and a touched file keeps its store."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from explorer.commands.corpus import _read_rows
from explorer.errors import CorpusError
from explorer.retrieval import building
from explorer.retrieval import passage_store as store_module
from explorer.retrieval.bm25 import BM25Retriever
from explorer.retrieval.bm25_index import BM25Index
from explorer.retrieval.corpora import load_corpus
from explorer.retrieval.health import corpus_health
from explorer.retrieval.passage_store import PassageStore


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EXPLORER_CACHE", str(cache))
    return cache


def dpr_lines(n: int) -> list[str]:
    """n rows in the psgs_w100.tsv layout, texts quoted the way DPR's file quotes them."""
    return [f'{i}\t"Passage {i} says ""hello"" about topic{i} and more words"\tTitle {i}\n' for i in range(1, n + 1)]


def write_tsv(path: Path, rows: list[str]) -> Path:
    path.write_text("id\ttext\ttitle\n" + "".join(rows), encoding="utf-8")
    return path


def test_an_unbalanced_quote_is_named_with_its_lines_and_the_count_against_the_lines(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = dpr_lines(1000)
    rows[499] = '500\t"An opened quote that is never closed on its line\tTitle 500\n'  # file line 501
    rows[500] = '501\tthe next passage, which holds a closing" quote\tTitle 501\n'  # joined into 500's text
    path = write_tsv(tmp_path / "psgs_w100_part.tsv", rows)
    with caplog.at_level(logging.WARNING, logger="explorer"):
        corpus = load_corpus(path)
    assert len(corpus) == 999 and corpus.passage("501") is None  # read as DPR's csv reading reads it...
    warning = " ".join(r.getMessage() for r in caplog.records)
    # ...but not silently: the record, its lines, what it holds, and the count against the lines
    assert "1 record(s) span more than one line" in warning
    assert "line 501 to 502 (id '500', holding a tab and a line break)" in warning
    assert "999 passages were read from 1,000 lines after the header" in warning
    read = corpus.store.manifest["read"]
    assert (read["records"], read["data_lines"], read["spanning_count"]) == (999, 1000, 1)
    out = str(_read_rows(load_corpus(path).store.manifest["read"]))  # what `corpus info` shows every time
    health = corpus_health(BM25Retriever(corpus))  # and what every trace's corpus facts carry
    assert health["read"] == {"records": 999, "lines": 1000, "joined_lines": 1, "overlong_rows": 0, "ok": False}
    assert health["ok"] is False

    assert "999 records read from 1,000 lines" in out and "line 501 to 502" in out
    # many such records: the first are named, all are listed (up to a thousand) in the store's manifest
    many = [f'{i}\t"opened\tT{i}\n' if i % 2 else f'{i}\tclosed" here\tT{i}\n' for i in range(1, 61)]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="explorer"):
        # (a repeated record makes the build look its lines up again: a partial reading changes no count)
        joined = load_corpus(write_tsv(tmp_path / "many.tsv", [*many, "62\tsame\tT\n", "62\tsame\tT\n"]))
    listed = joined.store.manifest["read"]
    assert listed["spanning_count"] == 30 and len(listed["spanning"]) == 30 and len(joined) == 31
    assert (listed["records"], listed["data_lines"]) == (32, 62) and "'62' at" in caplog.text
    assert listed["spanning"][-1] == "line 60 to 61 (id '59', holding a tab and a line break)"
    assert "; and 20 more (listed in the passage store's manifest.json)" in caplog.text
    # a tab inside a quoted text (one line) is named too
    tabbed = write_tsv(tmp_path / "tabbed.tsv", ['1\t"a text\twith a tab"\tT\n', "2\tplain\tU\n"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="explorer"):
        load_corpus(tabbed)
    assert "line 2 (id '1', holding a tab)" in " ".join(r.getMessage() for r in caplog.records)


def test_bad_bytes_are_placed_on_their_line_and_nul_bytes_and_huge_rows_are_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [r.encode() for r in dpr_lines(1000)]
    rows[699] = b'700\t"caf\xe9 au lait"\tCafe\n'  # latin-1, file line 701, far past the first read-ahead block
    latin = tmp_path / "latin.tsv"
    latin.write_bytes(b"id\ttext\ttitle\n" + b"".join(rows))
    with pytest.raises(CorpusError) as bad:
        load_corpus(latin)
    assert bad.value.where == f"{latin}:701" and "not UTF-8" in bad.value.what and "byte 9 of the line" in \
        bad.value.what

    rows = dpr_lines(50)
    rows[9] = "10\tbroken\x00text\tT\n"  # file line 11
    nul = write_tsv(tmp_path / "nul.tsv", rows)
    with pytest.raises(CorpusError) as zero:
        load_corpus(nul)
    assert zero.value.where == f"{nul}:11" and "NUL byte" in zero.value.what and "tr -d" in zero.value.fix
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("first line\nsecond\x00line\n", encoding="utf-8")
    with pytest.raises(CorpusError) as zero:
        load_corpus(folder)
    assert zero.value.where == f"{folder / 'a.txt'}:2" and "NUL byte" in zero.value.what

    rows = dpr_lines(20)
    text = " ".join(f"wd{i % 997:03d}" for i in range(216_000))  # 1.3 MB: two files joined, say
    rows[4] = f"5\t{text}\tHuge\n"  # file line 6
    huge = write_tsv(tmp_path / "huge.tsv", rows)
    with caplog.at_level(logging.WARNING, logger="explorer"):
        corpus = load_corpus(huge)
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert corpus.passage("5") is None and corpus.passage("5#2160") is not None  # cut, as before ...
    assert "1 row(s) are longer than 20,000 characters" in warning  # ... and now said, with where and how big
    assert f"line 6 (id '5', {len(text):,} characters, 216,000 words)" in warning and len(text) > 1_295_000
    assert "names none of them" in warning
    assert corpus.store.manifest["read"]["long_count"] == 1


def test_the_disk_check_covers_the_whole_build_before_the_store_is_written(
        tmp_path: Path, private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from explorer.retrieval.registry import open_retriever

    path = write_tsv(tmp_path / "small.tsv", dpr_lines(200))
    parts = store_module.whole_build_bytes(path.stat().st_size, ("bm25",))
    real = shutil.disk_usage
    # room for the passage store alone (and, on its own, for the BM25 stage too), not for both
    free = parts["passage store"] + parts["BM25 index"] // 2
    monkeypatch.setattr(building.shutil, "disk_usage", lambda p: real(p)._replace(free=free))
    with pytest.raises(CorpusError) as refused:
        open_retriever(str(path))
    what = refused.value.what
    assert "not enough free disk space to build the passage store (about" in what and "BM25 index (about" in what
    written = [f for f in private_cache.rglob("*") if f.is_file() and f.name != ".lock"]
    assert written == [], "nothing is written before the refusal"
    assert len(load_corpus(path, follows=())) == 200  # reading alone (corpus info) still fits


def test_a_flipped_byte_in_a_store_or_index_file_is_refused_when_opened(tmp_path: Path) -> None:
    path = write_tsv(tmp_path / "c.tsv", dpr_lines(300))
    retriever = BM25Retriever(load_corpus(path))
    index_folder, store_folder = retriever.index_path, retriever.corpus.store.folder
    BM25Index(index_folder)  # whole: opens
    for folder, name, opener in ((index_folder, "post_scores.f32", BM25Index),
                                 (store_folder, "records.bin", PassageStore)):
        file = folder / name
        data = bytearray(file.read_bytes())
        data[len(data) // 2] ^= 0x01  # one bit, same size
        file.write_bytes(bytes(data))
        with pytest.raises(CorpusError) as damaged:
            opener(folder)
        assert f"file {name} is damaged" in damaged.value.what and damaged.value.where == str(file)
        assert str(folder) in damaged.value.fix
        data[len(data) // 2] ^= 0x01
        file.write_bytes(bytes(data))
        opener(folder)  # repaired: opens again


def test_a_touched_file_keeps_its_store_and_a_resumed_build_counts_every_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_tsv(tmp_path / "t.tsv", dpr_lines(400))
    first = load_corpus(path)
    records = first.store.folder / "records.bin"
    written = records.stat().st_mtime_ns
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**10))  # touched: same bytes, a new time
    again = load_corpus(path)
    assert again.store.folder == first.store.folder and records.stat().st_mtime_ns == written  # not rewritten
    assert again.store.manifest["stamp"] == [stat.st_size, stat.st_mtime_ns + 10**10]
    path.write_text(path.read_text(encoding="utf-8").replace("Title 7\n", "Title 8\n"), encoding="utf-8")
    assert path.stat().st_size == stat.st_size  # same size, other bytes: read again
    assert load_corpus(path).fingerprint != first.fingerprint

    # a build interrupted after its first checkpoint, then resumed: the manifest counts both sessions' time
    monkeypatch.setattr(store_module, "FLUSH_DOCS", 50)
    monkeypatch.setattr(store_module, "CHECKPOINT_DOCS", 100)
    real_split, calls = store_module.split_text_counted, {"n": 0}

    def slow_then_killed(text, max_words):
        calls["n"] += 1
        if calls["n"] <= 150:
            import time

            time.sleep(0.004)  # the first session takes at least 0.6 s
        if calls["n"] == 150:
            raise KeyboardInterrupt
        return real_split(text, max_words)

    monkeypatch.setattr(store_module, "split_text_counted", slow_then_killed)
    other = write_tsv(tmp_path / "r.tsv", dpr_lines(400))
    with pytest.raises(KeyboardInterrupt):
        load_corpus(other)
    resumed = load_corpus(other).store.manifest
    assert resumed["resumed"] is True and resumed["sessions"] == 2
    assert resumed["seconds"] >= 0.4, resumed["seconds"]  # the first session's time up to its checkpoint
