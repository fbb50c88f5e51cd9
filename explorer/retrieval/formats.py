"""Readers for every corpus format the explorer accepts, each yielding :class:`Document` records.

A file has a *container* (TSV, a JSON array, JSON lines, optionally gzipped, or a folder) and a
*record shape*; the two are independent, because the same shape ships both ways (MuSiQue's
official file is JSON lines, the sample here is a JSON array; NQ oracle files are gzipped lines).
Shapes:

==========  =====================================================================================
dpr         DPR ``psgs_w100`` TSV with the header ``id  text  title`` (quoted the way csv writes)
passages    ``{id, title, text}`` records, or FlashRAG's ``{id, contents}`` where ``contents`` is
            ``"Title"\\ntext``; ``id`` and ``title`` may be absent (the 2WikiMultihopQA corpus)
hotpotqa    questions with ``context`` = [[title, [sentences]]] (HotpotQA, and 2WikiMultihopQA's
2wiki       official format, told apart by its ``evidences``)
musique     questions with ``paragraphs`` = [{title, paragraph_text, is_supporting}]
nq          questions with ``ctxs`` = [{title, text}] (NQ-open oracle / DPR retriever output)
txt         a folder of ``.txt`` files (title = file name without extension), or one such file
title-      one JSON object mapping each title to its sentences, ``{title: [sentence, ...]}``
sentences   (the layout HippoRAG and others ship corpora in)
title-text  one JSON object mapping each title to its text, ``{title: text}``
==========  =====================================================================================

Paragraphs taken from questions have no id of their own; they get the content id of
:mod:`explorer.retrieval.splitter`, so a paragraph shared by many questions is one document.
Every malformed record raises :class:`CorpusError` naming the file, the line (or item and JSON
path) and the reason.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import re
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from explorer.errors import CorpusError, json_problem, parse_json
from explorer.options import option
from explorer.retrieval.splitter import Document, join_sentences, paragraph_document

FORMATS = ("dpr", "passages", "hotpotqa", "2wiki", "musique", "nq", "txt", "title-sentences", "title-text")
QUESTION_FORMATS = ("hotpotqa", "2wiki", "musique", "nq")
# Detection failed on a record: say what a record needs, and how to name a layout where that is possible.
_SHAPE_FIX = ("give every record a 'text' (and optionally 'id' and 'title'), or use a known layout: HotpotQA/2Wiki "
              "'context', MuSiQue 'paragraphs', NQ 'ctxs' (`python -m explorer corpus info FILE` checks a file)")
TITLE_MAPS = ("title-sentences", "title-text")
log = logging.getLogger("explorer.corpus")


def _format_fix() -> str:
    """How to name a corpus format where the error is shown (an option, or the convert command)."""
    name = option("corpus_format")
    if name:
        return f"name the format with {name} (one of {', '.join(FORMATS)})"
    return ("store it in one of the corpus formats (see `python -m explorer corpus info --help`), or convert it: "
            "python -m explorer corpus convert FILE OUT.jsonl --format FORMAT")

def _shape_fix() -> str:
    """What a record needs, and how to name its layout where the caller can."""
    name = option("corpus_format")
    return _SHAPE_FIX + (f"; or name the format with {name} (one of {', '.join(FORMATS)})" if name else "")


Record = tuple[str, Any]  # (where, parsed JSON value)


# --- containers -----------------------------------------------------------------------------------


def _strip_gz(name: str) -> str:
    return name[:-3] if name.endswith(".gz") else name


def container_of(path: Path) -> str:
    """``folder``, ``tsv``, ``json``, ``jsonl`` or ``txt`` from the path; CorpusError for anything else."""
    if path.is_dir():
        return "folder"
    name = _strip_gz(path.name.lower())
    for suffix, container in ((".tsv", "tsv"), (".jsonl", "jsonl"), (".ndjson", "jsonl"), (".json", "json"),
                              (".txt", "txt")):
        if name.endswith(suffix):
            return container
    raise CorpusError(f"cannot tell the format of '{path.name}' from its extension", where=str(path),
                      fix="name it .tsv, .json, .jsonl (optionally .gz) or .txt, or point at a folder of .txt files")


def open_text(path: Path) -> io.TextIOBase:
    """A UTF-8 text stream, gunzipped when the name ends in .gz."""
    try:
        if path.name.lower().endswith(".gz"):
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
        return open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise CorpusError(f"cannot open the file ({exc.strerror or exc})", where=str(path),
                          fix="check the path and its permissions") from exc


def _open_bytes(path: Path) -> io.BufferedIOBase:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115


def first_bad_utf8(path: Path) -> tuple[int, int, str] | None:
    """(line, byte column, reason) of the first bytes of the file that are not UTF-8, or None.

    A text stream decodes ahead of the line being parsed, so its error cannot say which line holds
    the bad bytes; the file is read again, line by line, only when there is an error to place."""
    try:
        with _open_bytes(path) as stream:
            for number, raw in enumerate(stream, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return number, exc.start + 1, str(exc.reason)
    except (OSError, EOFError):
        return None
    return None


@contextmanager
def _read_errors(where: Callable[[], str], path: Path | None = None) -> Iterator[None]:
    """Turn decoding and gzip errors met while reading into a CorpusError at the current position
    (for a decoding error, the line that holds the bad bytes, found by reading ``path`` again)."""
    try:
        yield
    except UnicodeDecodeError as exc:
        found = first_bad_utf8(path) if path is not None else None
        if found is None:
            raise CorpusError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", where=where(),
                              fix="re-save the file as UTF-8") from exc
        line, column, reason = found
        raise CorpusError(f"not UTF-8 text ({reason} at byte {column} of the line)", where=f"{path}:{line}",
                          fix="re-save the file as UTF-8") from exc
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise CorpusError(f"cannot read the file ({exc})", where=where(),
                          fix="the file is damaged or truncated; download it again") from exc


def iter_jsonl(path: Path) -> Iterator[Record]:
    """(``file:line``, value) for every non-blank line."""
    number = 0
    with open_text(path) as stream, _read_errors(lambda: f"{path}:{number + 1}", path):
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", parse_json(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"not valid JSON ({json_problem(exc)})", where=f"{path}:{number}",
                                  fix="write one JSON object per line") from exc


def load_json(path: Path) -> Any:
    with open_text(path) as stream, _read_errors(lambda: str(path), path):
        try:
            return parse_json(stream.read())
        except json.JSONDecodeError as exc:
            raise CorpusError(f"not valid JSON ({json_problem(exc, column=False)})",
                              where=f"{path}:{exc.lineno}:{exc.colno}",
                              fix="check the file is complete JSON (a list of records)") from exc


def iter_json_array(path: Path, data: Any = None) -> Iterator[Record]:
    """(``file [item i]``, value) for every element of a top-level JSON list (``data``: already parsed)."""
    data = load_json(path) if data is None else data
    if not isinstance(data, list):
        raise CorpusError(f"expected a JSON list of records at the top level, found {type(data).__name__}",
                          where=str(path), fix="store the records as a JSON array, or as JSON lines (.jsonl), or "
                                               "as one object {title: text} or {title: [sentence, ...]}")
    for index, value in enumerate(data):
        yield f"{path} [item {index}]", value


def iter_records(path: Path, container: str) -> Iterator[Record]:
    return iter_jsonl(path) if container == "jsonl" else iter_json_array(path)


# --- field checks ---------------------------------------------------------------------------------


def _fail(where: str, what: str, fix: str) -> CorpusError:
    return CorpusError(what, where=where, fix=fix)


def _need(record: Any, key: str, kind: type | tuple[type, ...], where: str, path: str, fix: str) -> Any:
    """record[key] checked for presence and type; ``path`` is the JSON path shown in the message."""
    if not isinstance(record, dict):
        raise _fail(where, f"{path or 'the record'} should be a JSON object, found {type(record).__name__}", fix)
    if key not in record:
        raise _fail(where, f"missing key '{key}' in {path or 'the record'}", fix)
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise _fail(where, f"{path}.{key} should be {names}, found {type(value).__name__}", fix)
    return value


def _optional_str(record: dict, key: str, where: str, fix: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _fail(where, f"'{key}' should be a string, found {type(value).__name__}", fix)
    return value


def _record_id(record: dict, where: str, fix: str) -> str | None:
    for key in ("id", "_id", "docid"):
        if key in record and record[key] is not None:
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise _fail(where, f"'{key}' should be a string or an integer, found {type(value).__name__}", fix)
            text = str(value).strip()
            if not text:
                raise _fail(where, f"'{key}' is empty", fix)
            return text
    return None


# --- record shapes --------------------------------------------------------------------------------

_PASSAGES_FIX = 'give each record "text" (or FlashRAG\'s "contents"), and optionally "id" and "title"'


def split_contents(contents: str) -> tuple[str, str]:
    """FlashRAG ``contents``: the first line is the title (DPR quotes it), the rest the text."""
    first, sep, rest = contents.partition("\n")
    if not sep:
        return "", contents.strip()
    title = first.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, rest.strip()


def lift_metadata(record: Any) -> Any:
    """A FlashRAG record with its benchmark's own fields lifted out of ``metadata``.

    FlashRAG keeps ``{id, question, golden_answers}`` on top and the original release's fields
    (HotpotQA's ``context`` and ``supporting_facts``, MuSiQue's ``paragraphs`` ...) under
    ``metadata``; lifted, the record reads like the original. A field on top wins."""
    if isinstance(record, dict) and "golden_answers" in record and isinstance(record.get("metadata"), dict):
        lifted = dict(record["metadata"])
        lifted.update((k, v) for k, v in record.items() if k != "metadata")
        return lifted
    return record


def passage_record(where: str, record: Any) -> Iterator[Document]:
    if not isinstance(record, dict):
        raise _fail(where, f"expected a JSON object, found {type(record).__name__}", _PASSAGES_FIX)
    if "text" in record:
        text = _need(record, "text", str, where, "", _PASSAGES_FIX)
        title = _optional_str(record, "title", where, _PASSAGES_FIX) or ""
    elif "contents" in record:
        title, text = split_contents(_need(record, "contents", str, where, "", _PASSAGES_FIX))
    else:
        raise _fail(where, "missing key 'text' (or 'contents')", _PASSAGES_FIX)
    doc_id = _record_id(record, where, _PASSAGES_FIX)
    if doc_id is None:
        yield paragraph_document(title, text, where)
    else:
        yield Document(id=doc_id, title=title, text=text, where=where)


_CONTEXT_FIX = "use the official HotpotQA / 2WikiMultihopQA format: context = [[title, [sentence, ...]], ...]"


def context_record(where: str, record: Any) -> Iterator[Document]:
    context = _need(record, "context", (list, dict), where, "", _CONTEXT_FIX)
    if isinstance(context, dict):  # the Hugging Face datasets layout: {title: [...], sentences: [[...]]}
        titles = _need(context, "title", list, where, ".context", _CONTEXT_FIX)
        key = "content" if "sentences" not in context and "content" in context else "sentences"  # 2Wiki: content
        sentences = _need(context, key, list, where, ".context", _CONTEXT_FIX)
        if len(titles) != len(sentences):
            raise _fail(where, ".context has different numbers of titles and sentence lists", _CONTEXT_FIX)
        context = [list(pair) for pair in zip(titles, sentences, strict=True)]
    for i, item in enumerate(context):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)
                and all(isinstance(s, str) for s in item[1])):
            raise _fail(where, f".context[{i}] should be [title, [sentence, ...]]", _CONTEXT_FIX)
        yield paragraph_document(item[0], join_sentences(item[1]), f"{where} .context[{i}]")


_MUSIQUE_FIX = "use the official MuSiQue format: paragraphs = [{title, paragraph_text, is_supporting}, ...]"


def _titled_paragraphs(record: Any, where: str, key: str, text_key: str, fix: str) -> Iterator[Document]:
    """The documents of a record's list ``key`` of ``{title, <text_key>}`` objects, each checked where it stands."""
    items = _need(record, key, list, where, "", fix)
    for i, item in enumerate(items):
        path = f".{key}[{i}]"
        title = _need(item, "title", str, where, path, fix)
        text = _need(item, text_key, str, where, path, fix)
        yield paragraph_document(title, text, f"{where} {path}")


def musique_record(where: str, record: Any) -> Iterator[Document]:
    yield from _titled_paragraphs(record, where, "paragraphs", "paragraph_text", _MUSIQUE_FIX)


_NQ_FIX = "use the NQ-open oracle format: ctxs = [{title, text}, ...]"


def ctxs_record(where: str, record: Any) -> Iterator[Document]:
    yield from _titled_paragraphs(record, where, "ctxs", "text", _NQ_FIX)


SHAPE_READERS: dict[str, Callable[[str, Any], Iterator[Document]]] = {
    "passages": passage_record,
    "hotpotqa": context_record,
    "2wiki": context_record,
    "musique": musique_record,
    "nq": ctxs_record,
}


def _file_of(where: str) -> str:
    """The file of a record's locator (``FILE:LINE`` of JSON lines, ``FILE [item N]`` of a JSON list)."""
    return re.sub(r"( \[item \d+\]|:\d+)$", "", where)


def shape_of(where: str, record: Any) -> str:
    """The record shape from its keys (used on the first record when no format is given)."""
    if isinstance(record, dict):
        if "context" in record:
            return "2wiki" if "evidences" in record else "hotpotqa"
        if "paragraphs" in record:
            return "musique"
        if "ctxs" in record:
            return "nq"
        if "text" in record or "contents" in record:
            return "passages"
        keys = ", ".join(sorted(map(str, record))[:8])
        if {str(k).lower() for k in record} & {"question", "query"}:
            file = shlex.quote(_file_of(where))
            raise CorpusError(f"this is a question file, not a corpus: its records hold questions ({keys}) and no "
                              "passage text", where=where,
                              fix=f"ask its questions with `python -m explorer eval --dataset {file} --corpus CORPUS "
                                  "--methods wo,sr,dragin` (CORPUS: the passages to search, e.g. demo or your corpus "
                                  f"file); `python -m explorer corpus build --dataset {file}` pools the paragraphs of "
                                  "question files whose records carry them (HotpotQA, 2Wiki, MuSiQue, NQ)")
        raise CorpusError(f"cannot tell the format from the keys ({keys}): a passage needs a 'text' key",
                          where=where, fix=_shape_fix())
    raise CorpusError(f"expected a JSON object, found {type(record).__name__}", where=where, fix=_shape_fix())


# --- {title: [sentences]} and {title: text} ------------------------------------------------------

_TITLE_MAP_FIX = "map every title to its text (a string) or to its sentences (a list of strings)"


def title_map_shape(data: dict, path: Path) -> str:
    """``title-sentences`` or ``title-text`` from the first entry's value."""
    for value in data.values():
        return "title-sentences" if isinstance(value, list) else "title-text"
    raise CorpusError("the JSON object holds no titles", where=str(path), fix="add at least one title and its text")


def iter_title_map(path: Path, data: dict) -> Iterator[Document]:
    """One paragraph per title; a list of sentences is joined the way HotpotQA's are."""
    for index, (title, value) in enumerate(data.items()):
        where = f"{path} [entry {index + 1}, title {title!r:.60}]"
        if isinstance(value, str):
            text = value
        elif isinstance(value, list) and all(isinstance(s, str) for s in value):
            text = join_sentences(value)
        elif isinstance(value, list):
            kinds = ", ".join(sorted({type(s).__name__ for s in value if not isinstance(s, str)}))
            raise CorpusError(f"the value is a list holding {kinds}, not a list of sentences", where=where,
                              fix=_TITLE_MAP_FIX + "; records {id, title, text} go in a JSON list at the top level")
        else:
            raise CorpusError(f"the value is a {type(value).__name__}, not a text or a list of sentences",
                              where=where, fix=_TITLE_MAP_FIX)
        yield paragraph_document(title, text, where)


# --- DPR TSV and text files -----------------------------------------------------------------------

_DPR_FIX = "DPR passages are tab-separated with the header 'id<TAB>text<TAB>title'"
#: A DPR passage is 100 words (about 600 characters); a row this long is not one passage but damage (two files
#: joined, lines merged by a quote), and it would be cut into hundreds of passages none of which has its id.
LONG_ROW_CHARS = 20_000
NAMED_ROWS = 10  # rows named one by one in a warning and by `corpus info`
LISTED_ROWS = 1000  # rows listed in the store's manifest (``read``); beyond, counted


def named_rows(rows: list[str], count: int) -> str:
    """The first rows by line, and how many more (all listed up to LISTED_ROWS in the store's manifest)."""
    shown = rows[:NAMED_ROWS]
    more = count - len(shown)
    return "; ".join(shown) + (f"; and {more:,} more" + (" (listed in the passage store's manifest.json)"
                                                          if len(rows) > len(shown) else "") if more else "")


def _tsv_report(path: Path, notes: dict[str, Any]) -> None:
    """Warn about the rows a DPR file should not have, naming each (the first few) by line, and say how many
    records were read from how many lines: nothing the csv reading joined or cut passes without a word."""
    spanning, long_rows = notes["spanning"], notes["long_rows"]
    counted = (f"{notes['records']:,} passages were read from {notes['data_lines']:,} lines after the header"
               + (f" ({notes['blank_lines']:,} blank)" if notes["blank_lines"] else ""))
    if notes["spanning_count"]:
        log.warning("%s: %d record(s) span more than one line or hold a tab (in DPR's files every passage is "
                    "one line; an unbalanced quote joins the lines after it into one passage, and their ids "
                    "are lost): %s. %s. Fix the quoting of those lines (a quote inside a text is written twice, "
                    "\"\") if they were not meant as one passage", path, notes["spanning_count"],
                    named_rows(spanning, notes["spanning_count"]), counted)
    if notes["long_count"]:
        log.warning("%s: %d row(s) are longer than %s characters (a DPR passage is about 600): %s. Each is cut "
                    "into passages ID#1, ID#2, ... and its own id names none of them; check those lines (two "
                    "files joined, or lines merged)", path, notes["long_count"], f"{LONG_ROW_CHARS:,}",
                    named_rows(long_rows, notes["long_count"]))


def iter_dpr_tsv(path: Path, notes: dict[str, Any] | None = None) -> Iterator[Document]:
    """DPR passages, read as DPR's own reader reads them (csv with a tab delimiter, quotes honoured: its
    ``psgs_w100.tsv`` quotes texts that hold quotes), and checked line by line: a record that spans lines
    or holds a tab, a row far longer than a passage, a NUL byte, and the count of records against the
    count of lines are all reported (``notes``, filled when the file has been read, and warnings)."""
    csv.field_size_limit(1 << 30)
    line = 0
    found: dict[str, Any] = {"records": 0, "data_lines": 0, "blank_lines": 0, "spanning": [], "spanning_count": 0,
                             "long_rows": [], "long_count": 0}
    with open_text(path) as stream, _read_errors(lambda: f"{path}:{line + 1}", path):
        reader = csv.reader(stream, delimiter="\t")
        try:
            header = [h.strip().lower() for h in next(reader)]
        except StopIteration:
            raise CorpusError("the file is empty", where=str(path), fix=_DPR_FIX) from None
        missing = [c for c in ("id", "text", "title") if c not in header]
        if missing:
            raise CorpusError(f"the header lacks column(s) {', '.join(missing)} (found: {', '.join(header)})",
                              where=f"{path}:1", fix=_DPR_FIX)
        at = {name: header.index(name) for name in ("id", "text", "title")}
        first_data = reader.line_num + 1
        try:
            for row in reader:
                start, line = line + 1 if line else first_data, reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    found["blank_lines"] += line - start + 1
                    continue
                where = f"{path}:{start}"
                if len(row) != len(header):
                    raise CorpusError(f"expected {len(header)} tab-separated columns, found {len(row)}"
                                      + (f" (the record runs from line {start} to line {line}: a quote opened on "
                                         f"line {start} is closed only there)" if line > start else ""),
                                      where=where, fix=_DPR_FIX + (" (a quote inside a text is written twice, \"\")"
                                                                  if line > start else ""))
                doc_id, title, text = row[at["id"]].strip(), row[at["title"]], row[at["text"]]
                if not doc_id:
                    raise CorpusError("empty id", where=where, fix=_DPR_FIX)
                if "\x00" in text or "\x00" in title or "\x00" in doc_id:
                    raise CorpusError("the row holds a NUL byte (\\x00), which no text has: the file is damaged",
                                      where=where, fix="download the file again, or remove the NUL bytes "
                                                       "(e.g. tr -d '\\000' < IN > OUT)")
                found["records"] += 1
                if line > start or "\t" in text or "\t" in title:
                    found["spanning_count"] += 1
                    if len(found["spanning"]) < LISTED_ROWS:
                        both = text + title
                        held = [what for what, there in (("a tab", "\t" in both),
                                                          ("a line break", "\n" in both or "\r" in both)) if there]
                        found["spanning"].append(f"line {start}" + (f" to {line}" if line > start else "")
                                                 + f" (id {doc_id!r:.40}, holding {' and '.join(held) or 'a tab'})")
                if len(text) > LONG_ROW_CHARS:
                    found["long_count"] += 1
                    if len(found["long_rows"]) < LISTED_ROWS:
                        found["long_rows"].append(f"line {start} (id {doc_id!r:.40}, {len(text):,} characters, "
                                                  f"{len(text.split()):,} words)")
                yield Document(id=doc_id, title=title, text=text, where=where)
        except csv.Error as exc:
            raise CorpusError(f"malformed TSV ({exc})", where=f"{path}:{reader.line_num}", fix=_DPR_FIX) from exc
        found["data_lines"] = max(0, reader.line_num - first_data + 1)
    _tsv_report(path, found)
    if notes is not None:  # only a reading to the end reports (a partial one, looking up a record, does not)
        notes.clear()
        notes.update(found)


def _read_txt(path: Path, doc_id: str) -> Document:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", where=str(path),
                          fix="re-save the file as UTF-8") from exc
    except OSError as exc:
        raise CorpusError(f"cannot read the file ({exc.strerror or exc})", where=str(path)) from exc
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise CorpusError("the file holds a NUL byte (\\x00), which no text has: the file is damaged or not text",
                          where=f"{path}:{line}", fix="remove the NUL bytes (e.g. tr -d '\\000' < IN > OUT)")
    return Document(id=doc_id, title=path.stem, text=text, where=str(path))


def iter_txt(path: Path) -> Iterator[Document]:
    """One document per .txt file (searched recursively); id = path inside the folder without .txt."""
    if path.is_file():
        yield _read_txt(path, path.stem)
        return
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() == ".txt")
    if not files:
        raise CorpusError("the folder holds no .txt files", where=str(path),
                          fix="put one UTF-8 .txt file per document in it, or point at a corpus file")
    for file in files:
        yield _read_txt(file, file.relative_to(path).with_suffix("").as_posix())


# --- dispatch -------------------------------------------------------------------------------------


def _check_format(fmt: str) -> str:
    name = fmt.strip().lower()
    aliases = {"jsonl": "passages", "json": "passages", "flashrag": "passages", "tsv": "dpr", "psgs_w100": "dpr",
               "2wikimultihopqa": "2wiki", "hotpot": "hotpotqa", "folder": "txt", "text": "txt"}
    name = aliases.get(name, name)
    if name not in FORMATS:
        raise CorpusError(f"unknown corpus format '{fmt}'", where="format", fix=_format_fix())
    return name


def open_documents(path: Path, fmt: str | None = None,
                   notes: dict[str, Any] | None = None) -> tuple[str, Iterator[Document]]:
    """The detected (or given) format and an iterator over the file's documents.

    Detection: a folder or ``.txt`` is ``txt``, ``.tsv`` is ``dpr``; for JSON the first record's keys
    decide, and every later record must have the same shape. ``notes`` receives what the reading of a
    DPR file found (records against lines, records spanning lines, overlong rows) once it is read.
    """
    if not path.exists():
        raise CorpusError(f"no such file or folder: {path}", fix="check the path, or use the corpus name 'demo'")
    container = container_of(path)
    wanted = _check_format(fmt) if fmt else None
    if container in ("folder", "txt"):
        if wanted not in (None, "txt"):
            raise CorpusError(f"format '{wanted}' cannot be read from a {container}", where=str(path),
                              fix=_format_fix())
        return "txt", iter_txt(path)
    if container == "tsv":
        if wanted not in (None, "dpr"):
            raise CorpusError(f"format '{wanted}' cannot be read from a .tsv file", where=str(path), fix=_format_fix())
        return "dpr", iter_dpr_tsv(path, notes)
    if wanted in ("dpr", "txt"):
        raise CorpusError(f"format '{wanted}' cannot be read from a JSON file", where=str(path), fix=_format_fix())
    if container == "json":
        data = load_json(path)
        if isinstance(data, dict):
            if wanted not in (None, *TITLE_MAPS):
                raise CorpusError(f"format '{wanted}' is a list of records, and the file holds one JSON object",
                                  where=str(path), fix=_format_fix())
            return wanted or title_map_shape(data, path), iter_title_map(path, data)
        if wanted in TITLE_MAPS:
            raise CorpusError(f"format '{wanted}' is one JSON object {{title: ...}}, and the file holds a "
                              f"{type(data).__name__}", where=str(path), fix=_format_fix())
        records = iter_json_array(path, data)
    else:
        records = iter_records(path, container)
    records = ((where, lift_metadata(record)) for where, record in records)
    first = next(records, None)
    if first is None:
        raise CorpusError("the file holds no records", where=str(path), fix="add at least one passage")
    shape = wanted or shape_of(*first)
    reader = SHAPE_READERS[shape]

    def documents() -> Iterator[Document]:
        yield from reader(*first)
        for record in records:
            yield from reader(*record)

    return shape, documents()
