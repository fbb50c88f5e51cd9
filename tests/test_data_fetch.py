"""``explorer data fetch``: benchmark files fetched from a local stand-in for the hub, the way a stranger fetches them.

Every download here is real HTTP through huggingface_hub to the server of :mod:`tests.hub_standin`
(``HF_ENDPOINT`` points at it); nothing leaves 127.0.0.1. A missing ``../shared`` is simulated by
pointing ``EXPLORER_DATA`` at an empty folder, and fetched files go to a temporary
``EXPLORER_DOWNLOADS``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.errors import CorpusError, DatasetError
from explorer.eval.datasets import load_dataset
from explorer.fetching.catalog import FLASHRAG_REPO, DataFile
from explorer.fetching.download import FetchError, fetch
from explorer.retrieval.splitter import join_sentences, paragraph_passage_ids, sentence_spans
from tests.hub_standin import COMMIT, HubStandIn, Served

ROOT = Path(__file__).resolve().parent.parent


def hotpot_record(i: int, filler: int = 0) -> dict:
    """One HotpotQA question as the FlashRAG collection ships it: the original fields under 'metadata'."""
    return {"id": f"5a8{i:05d}", "question": f"Which river flows through town {i}?", "golden_answers": [f"River {i}"],
            "metadata": {"type": "bridge", "level": "medium",
                         "supporting_facts": {"title": [f"Town {i}", f"River {i}"], "sent_id": [1, 0]},
                         "context": {"title": [f"Town {i}", f"River {i}", f"Other {i}"],
                                     "sentences": [[f"Town {i} is a small town.", f" The River {i} flows through it."],
                                                   [f"River {i} is a long river in the north."],
                                                   ["An unrelated paragraph." + " padding" * filler]]}}}


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


HOTPOT = jsonl([hotpot_record(i) for i in range(3)])
NQ = jsonl([{"id": "test_0", "question": "who wrote the iliad", "golden_answers": ["Homer"]},
            {"id": "test_1", "question": "when did the war end", "golden_answers": ["1945", "in 1945"]}])


@pytest.fixture()
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The stand-in hub holding FlashRAG's hotpotqa (a large, LFS file) and nq (a small one); online mode on.

    huggingface_hub reads HF_HUB_OFFLINE once, at import (the test session starts offline), so its
    switch is turned off here as the environment is, and turned back by monkeypatch afterwards."""
    from huggingface_hub import constants

    stand_in = HubStandIn(files={f"{FLASHRAG_REPO}/hotpotqa/dev.jsonl": Served(HOTPOT, lfs=True),
                                 f"{FLASHRAG_REPO}/nq/test.jsonl": Served(NQ)}).start()
    (tmp_path / "no-shared").mkdir()
    monkeypatch.setenv("EXPLORER_DATA", str(tmp_path / "no-shared"))
    monkeypatch.setenv("EXPLORER_DOWNLOADS", str(tmp_path / "fetched"))
    monkeypatch.setenv("HF_ENDPOINT", stand_in.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield stand_in
    stand_in.stop()


def test_fetch_shows_the_licence_verifies_and_puts_the_file_where_the_name_finds_it(hub, tmp_path, capsys) -> None:
    assert main(["data", "fetch", "hotpotqa", "nq"]) == 0
    err = capsys.readouterr().err
    # the licence is shown before the download
    assert err.index("licence: CC BY-SA 4.0") < err.index(f"hotpotqa: {len(HOTPOT):,} bytes")
    assert "sha256 verified" in err and "git-sha1 verified" in err  # the LFS hash, the small file's git blob hash
    target = tmp_path / "fetched" / "hotpotqa" / "dev.jsonl"
    assert target.read_bytes() == HOTPOT
    about = json.loads((tmp_path / "fetched" / "hotpotqa" / "dev.jsonl.source.json").read_text())
    assert (about["licence"], about["commit"], about["sha256"], about["checked_by"]) == \
        ("CC BY-SA 4.0", COMMIT, hashlib.sha256(HOTPOT).hexdigest(), "sha256")
    assert "hotpotqa.github.io" in about["source"] and "FlashRAG" in about["collection_licence"]
    # as from the hub: the metadata from the resolve address, the bytes from where it redirects (the CDN)
    assert [r[:2] for r in hub.log[:2]] == [("HEAD", f"/datasets/{FLASHRAG_REPO}/resolve/main/hotpotqa/dev.jsonl"),
                                           ("GET", f"/cdn/{hashlib.sha256(HOTPOT).hexdigest()}")]

    # the FlashRAG layout is read as the benchmark it holds: answers, type, and gold passages from its metadata
    questions = load_dataset("hotpotqa")
    sentences = hotpot_record(0)["metadata"]["context"]["sentences"][0]
    town = paragraph_passage_ids("Town 0", join_sentences(sentences), word_spans=[sentence_spans(sentences)[1]])
    river = paragraph_passage_ids("River 0", "River 0 is a long river in the north.")
    assert [q.id for q in questions] == ["5a800000", "5a800001", "5a800002"]
    assert (questions[0].answers, questions[0].type, questions[0].gold_passages) == (["River 0"], "bridge",
                                                                                      town + river)
    assert [q.answers for q in load_dataset("nq")] == [["Homer"], ["1945", "in 1945"]]

    before = len(hub.log)
    assert main(["data", "fetch", "hotpotqa"]) == 0 and len(hub.log) == before  # already there: no request
    assert "already fetched" in capsys.readouterr().err
    assert main(["data", "list"]) == 0
    assert f"present: {target}" in capsys.readouterr().out


@pytest.mark.slow
def test_a_killed_download_resumes_where_it_stopped(hub, tmp_path, capsys) -> None:
    """Ctrl-C in the middle of a download keeps the bytes that arrived; the next run asks only for the rest."""
    from huggingface_hub import constants

    chunk = constants.DOWNLOAD_CHUNK_SIZE  # what huggingface_hub writes at a time (10 MB)
    record = len(jsonl([hotpot_record(0, filler=60)]))
    big = jsonl([hotpot_record(i, filler=60) for i in range((chunk + 2_000_000) // record)])
    served = hub.files[f"{FLASHRAG_REPO}/hotpotqa/dev.jsonl"] = Served(big, lfs=True, hang_after=chunk + 1_000_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "explorer", "data", "fetch", "hotpotqa"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    part = tmp_path / "fetched" / "hotpotqa" / "dev.jsonl.part"
    deadline = time.monotonic() + 60
    while not (hub.stalled.is_set() and part.is_file() and part.stat().st_size > 0):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read() if process.poll() else ""
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    kept = part.stat().st_size
    assert process.returncode == 130 and "kept; the same command resumes" in err
    assert 0 < kept < len(big) and part.read_bytes() == big[:kept]

    served.hang_after = None
    hub.release.set()
    assert main(["data", "fetch", "hotpotqa"]) == 0
    assert f"resuming hotpotqa after {kept:,}" in capsys.readouterr().err
    assert hub.requests("GET")[-1][2] == f"bytes={kept}-"  # only the rest was asked for
    assert (tmp_path / "fetched" / "hotpotqa" / "dev.jsonl").read_bytes() == big and not part.exists()


def test_a_corrupted_download_is_refused_by_its_checksum(hub, tmp_path, capsys) -> None:
    damaged = HOTPOT.replace(b"River 1", b"River 7", 1)  # same size, other bytes
    hub.files[f"{FLASHRAG_REPO}/hotpotqa/dev.jsonl"].corrupt = damaged
    assert main(["data", "fetch", "hotpotqa"]) == 1
    err = capsys.readouterr().err
    assert "does not match its source" in err and hashlib.sha256(HOTPOT).hexdigest() in err and "deleted" in err
    folder = tmp_path / "fetched" / "hotpotqa"
    assert not (folder / "dev.jsonl").exists() and not (folder / "dev.jsonl.part").exists()
    with pytest.raises(DatasetError, match="data fetch hotpotqa"):
        load_dataset("hotpotqa")


def test_offline_and_unreachable_say_what_cannot_be_reached_and_what_to_do(hub, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["data", "fetch", "nq"]) == 1
    err = capsys.readouterr().err
    assert "offline mode is on (HF_HUB_OFFLINE=1)" in err and "HF_HUB_OFFLINE=0" in err and "copy nq/test.jsonl" in err
    assert hub.log == []  # nothing was asked

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert main(["data", "fetch", "nq"]) == 1
    assert f"cannot reach 127.0.0.1:{port} to fetch nq" in capsys.readouterr().err

    assert main(["data", "fetch", "squad"]) == 1
    assert "no fetchable file named 'squad'" in capsys.readouterr().err


def test_names_not_fetched_yet_say_how_to_fetch_them(hub, tmp_path, monkeypatch) -> None:
    with pytest.raises(DatasetError, match=r"python -m explorer data fetch musique"):
        load_dataset("musique")
    from explorer.retrieval.registry import open_retriever

    with pytest.raises(CorpusError, match=r"python -m explorer data fetch wikipedia"):
        open_retriever("wikipedia")
    monkeypatch.setenv("EXPLORER_CACHE", str(tmp_path / "fresh-cache"))  # no pooled benchmark corpus built yet
    with pytest.raises(CorpusError, match=r"benchmark samples.*--corpus hotpotqa"):
        open_retriever("benchmark")  # the default corpus of eval: what to search instead in a fresh clone


def _dpr_tsv_gz() -> bytes:
    rows = ["id\ttext\ttitle", "1\tAaron is a prophet in the Hebrew Bible.\tAaron",
            "2\tThe Nile is a river in Africa.\tNile", "3\tParis is the capital of France.\tParis"]
    return gzip.compress(("\n".join(rows) + "\n").encode(), mtime=0)


def test_dpr_wikipedia_from_a_plain_host_is_checked_and_becomes_the_wikipedia_corpus(hub, tmp_path) -> None:
    data = _dpr_tsv_gz()
    hub.plain["psgs_w100.tsv.gz"] = Served(data)  # S3-style: the ETag is the MD5 of the bytes
    item = DataFile(name="wikipedia", title="DPR passages", kind="corpus", path="wikipedia/psgs_w100.tsv.gz",
                    licence="CC BY-SA 3.0", source="DPR", size="", url=f"{hub.url}/files/psgs_w100.tsv.gz")
    said: list[str] = []
    path = fetch(item, say=said.append)
    assert path.read_bytes() == data and "md5 verified" in said[-1]
    from explorer.retrieval.corpora import load_corpus

    corpus = load_corpus("wikipedia")
    assert (corpus.name, len(corpus), corpus.passage("2").title) == ("wikipedia", 3, "Nile")

    # no checksum stated (a multipart upload's ETag): the gzip stream's own CRC is checked instead
    broken = bytearray(data)
    broken[len(broken) // 2] ^= 0xFF
    hub.plain["psgs_w100.tsv.gz"] = Served(bytes(broken), etag="9b2cf535f27731c974343645a3985328-3")
    with pytest.raises(FetchError, match="gzip stream is damaged"):
        fetch(item, force=True, say=said.append)
    assert not path.with_name(path.name + ".part").exists()


def test_flashrag_records_of_other_benchmarks(tmp_path: Path) -> None:
    """StrategyQA's yes/no and 2WikiMultihopQA's 'content' sentences, as the collection ships them."""
    strategy = tmp_path / "strategy.jsonl"
    strategy.write_bytes(jsonl([{"id": "s1", "question": "Is ice cold?", "golden_answers": ["yes"],
                                 "metadata": {"facts": ["Ice is frozen water."]}}]))
    [q] = load_dataset("strategyqa", path=strategy)
    assert (q.answers, q.type, q.extra["facts"]) == (["yes"], "yesno", ["Ice is frozen water."])
    two = tmp_path / "2wiki.jsonl"
    two.write_bytes(jsonl([{"id": "w1", "question": "Who?", "golden_answers": ["Ann"],
                            "metadata": {"type": "compositional", "evidences": [],
                                         "supporting_facts": {"title": ["Ann"], "sent_id": [0]},
                                         "context": {"title": ["Ann"], "content": [["Ann was born in 1900."]]}}}]))
    [w] = load_dataset("2wiki", path=two)
    assert w.gold_passages == paragraph_passage_ids("Ann", "Ann was born in 1900.") and w.type == "compositional"
    from explorer.eval.datasets import resolve_source

    assert resolve_source(str(two)).format == "2wiki"  # detected through the metadata, gold included


@pytest.mark.slow
def test_a_bare_clone_fetches_evaluates_and_reports(hub, tmp_path, capsys) -> None:
    """No ../shared: the README's path from a fresh clone, fetch, then eval, then report."""
    db = str(tmp_path / "runs.sqlite")
    run = ["eval", "--dataset", "hotpotqa", "--corpus", "hotpotqa", "--methods", "wo,sr", "--limit", "2", "--db", db,
           "--name", "fresh", "--quiet", "--set", "max_length=12", "--set", "answer_tokens=6", "--set", "fewshot=1"]
    assert main(run) == 1
    assert "python -m explorer data fetch hotpotqa" in capsys.readouterr().err
    assert main(["data", "fetch", "hotpotqa"]) == 0
    assert main(run) == 0
    out = capsys.readouterr().out
    assert "| sr |" in out and "| wo |" in out
    from explorer.store import RunStore

    traces = [t for _, t in RunStore(db).traces(evaluation="fresh")]
    assert len(traces) == 4 and all(t.status == "complete" for t in traces)
    sr = [t for t in traces if t.method == "sr"]
    hits = {h["id"] for t in sr for e in t.events if e.kind == "retrieval" for h in e.payload["hits"]}
    gold = {g for t in sr for g in t.gold["gold_passages"]}
    assert gold and gold & hits  # the question set's own paragraphs were searched, gold marked among them
    assert main(["report", "--name", "fresh", "--db", db, "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "evaluation.md").read_text()
    assert "sr" in report and "wo" in report
