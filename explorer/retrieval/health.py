"""Health checks a reproduction needs before trusting a corpus: its size, its index, its answers.

Shown by ``python -m explorer corpus info`` and ``corpus index``, and stored in every trace's
corpus facts (:func:`explorer.runtime.corpus_facts`), so a run says whether the corpus it
searched was whole:

- **passage count** against the known count of a known corpus (DPR's ``psgs_w100.tsv`` has
  21,015,324 passages: a truncated download or a wrong file shows at once);
- **sizes on disk** of the passage store and of the retriever's index;
- **how a DPR file was read**: its records against its lines, and how many records spanned lines or
  held a tab, or were far longer than a passage (each warned about by line when the file was read);
- **distinct queries, distinct results**: a few queries made from passages spread over the
  corpus (each passage's title and first words) must not all return the same list. An index
  whose postings were mixed up, or a retriever that answers every query with the same passages,
  fails this; a healthy one passes it in milliseconds.
"""

from __future__ import annotations

from typing import Any

from explorer.retrieval.building import folder_bytes

PROBES = 5
PROBE_WORDS = 8
PROBE_K = 5


def probe_queries(corpus: Any, count: int = PROBES) -> list[str]:
    """Queries from ``count`` passages at evenly spread positions: title plus the first words of the text."""
    n = len(corpus)
    rows = sorted({min(n - 1, (2 * i + 1) * n // (2 * count)) for i in range(count)}) if n else []
    out = []
    for passage in corpus.passages_at(rows):
        words = passage.text.split()[:PROBE_WORDS]
        out.append(" ".join([passage.title, *words]).strip())
    return out


def distinct_results(retriever: Any, corpus: Any) -> dict[str, Any]:
    """Whether distinct probe queries return distinct result lists."""
    queries = probe_queries(corpus)
    lists = [tuple(h.passage.id for h in retriever.search(q, PROBE_K)) for q in queries]
    answered = [ids for ids in lists if ids]
    distinct = len(set(answered))
    return {"queries": len(queries), "answered": len(answered), "distinct": distinct,
            "ok": len(answered) <= 1 or distinct == len(answered)}


def index_bytes(retriever: Any) -> int:
    """Bytes of the retriever's index files (BM25, dense, or both for a hybrid)."""
    parts = [getattr(retriever, name, None) for name in ("bm25", "dense")]
    if any(parts):
        return sum(index_bytes(p) for p in parts if p is not None)
    index = getattr(retriever, "index", None)
    size = getattr(index, "size_bytes", None)
    if callable(size):
        return int(size())
    path = getattr(retriever, "index_path", None)
    return folder_bytes(path) if path else 0


def corpus_health(retriever: Any) -> dict[str, Any]:
    """The health facts of a retriever's corpus and index, computed once per retriever."""
    held = getattr(retriever, "_health", None)
    if held is not None:
        return dict(held)
    corpus = getattr(retriever, "corpus", None)
    if corpus is None:
        return {}
    n = len(corpus)
    expected = getattr(corpus, "expected_passages", None)
    facts: dict[str, Any] = {
        "passages": n, "expected_passages": expected, "count_ok": expected is None or n == expected,
        "store_bytes": folder_bytes(corpus.store.folder), "index_bytes": index_bytes(retriever),
        "distinct_queries": distinct_results(retriever, corpus),
    }
    read = corpus.store.manifest.get("read") or {}
    if "records" in read:  # a DPR file: its records against its lines, and the rows warned about when read
        facts["read"] = {"records": read["records"], "lines": read["data_lines"],
                         "joined_lines": read.get("spanning_count", 0), "overlong_rows": read.get("long_count", 0)}
        facts["read"]["ok"] = not (facts["read"]["joined_lines"] or facts["read"]["overlong_rows"])
    facts["ok"] = bool(facts["count_ok"] and facts["distinct_queries"]["ok"] and facts.get("read", {}).get("ok", True))
    try:
        retriever._health = dict(facts)
    except AttributeError:  # a retriever with __slots__: recomputed next time
        pass
    return facts


def health_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    """The facts as (label, text) rows for the command line."""
    from explorer.retrieval.building import human_bytes

    if not facts:
        return []
    expected = facts.get("expected_passages")
    count = f"{facts['passages']:,}"
    if expected is not None:
        count += (" = the expected " if facts["count_ok"] else " but expected ") + f"{expected:,}"
        if not facts["count_ok"]:
            count += " (truncated or another file?)"
    probe = facts["distinct_queries"]
    verdict = ("ok" if probe["ok"] else "FAILED: different queries return the same passages") + \
        f" ({probe['distinct']} distinct result lists for {probe['answered']} answered of {probe['queries']} queries)"
    return [("passage count", count), ("store size", human_bytes(facts["store_bytes"])),
            ("index size", human_bytes(facts["index_bytes"])), ("distinct queries", verdict)]
