"""Reading a question file of any supported container and shape into :class:`Question` records.

Containers: a JSON list (``.json``), JSON lines (``.jsonl``, ``.ndjson``), or a table with a header
row (``.csv``, ``.tsv``), each optionally gzipped (``.gz``). The shape (:mod:`explorer.eval.question_formats`)
is given or detected from the first record's fields; every later record is read the same way.
JSON lines and tables are streamed, so a ``limit`` stops reading early on files of any size.

Every problem names the file, the line (or record), what is wrong and how to fix it; the fix
suggests an option only where the caller has one (:func:`explorer.options.option`).
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from explorer.errors import CorpusError, DatasetError, json_problem, parse_json
from explorer.eval.question import Question
from explorer.eval.question_formats import (
    FORMAT_TITLES,
    PARSERS,
    QUESTION_FORMATS,
    BadRecord,
    NoAnswer,
    canonical_format,
    detect_format,
)
from explorer.options import option, usage
from explorer.retrieval.formats import first_bad_utf8, load_json, open_text

CONTAINERS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv"}


def question_file_types() -> list[str]:
    """Every file-name ending a question file may have, plain or gzipped (for file pickers)."""
    return [ending for suffix in CONTAINERS for ending in (suffix, suffix + ".gz")]


def container_of(path: Path) -> str:
    name = path.name.lower()
    name = name[:-3] if name.endswith(".gz") else name
    for suffix, container in CONTAINERS.items():
        if name.endswith(suffix):
            return container
    raise DatasetError(f"cannot tell how {path} is stored from its name",
                       fix="name it .json (a list of questions), .jsonl (one question per line), or .csv / .tsv "
                           "(a header row with question and answer columns), optionally gzipped (.gz)")


def format_hint() -> str:
    """", or name the format with --format ..." where the caller can name it, else nothing."""
    name = option("dataset_format")
    if not name:
        return ""
    return f", or name the format with {name} ({', '.join(QUESTION_FORMATS)})"


def check_format(fmt: str) -> str:
    key = canonical_format(fmt)
    if key is None:
        name = option("dataset_format")
        raise DatasetError(f"unknown question format '{fmt}'", where=name,
                           fix=f"use one of {', '.join(QUESTION_FORMATS)}" + ("" if name else " (or leave it out to "
                                                                                              "detect it)"))
    return key


# --- containers -----------------------------------------------------------------------------------


def _from_corpus_error(exc: CorpusError, path: Path) -> DatasetError:
    """A read error of the shared readers, rephrased for a question file (file:line:col -> line of file)."""
    where = exc.where or str(path)
    parts = where[len(str(path)):].lstrip(":").split(":") if where.startswith(str(path)) else []
    if parts and parts[0].isdigit():
        where = f"line {parts[0]} of {path}"
    joined = f"{where} is {exc.what}" if exc.what.startswith("not ") else f"{where}: {exc.what}"
    return DatasetError(joined, fix=exc.fix)


def _not_utf8(path: Path, exc: UnicodeDecodeError) -> DatasetError:
    """The line that holds the bytes that are not UTF-8 (found by reading the file again: the text stream
    decodes ahead of the line being read)."""
    found = first_bad_utf8(path)
    where = f"line {found[0]} of {path}" if found else str(path)
    return DatasetError(f"{where} is not UTF-8 text ({found[2] if found else exc.reason})",
                        fix="re-save the file as UTF-8")


def _jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    number = 0
    try:
        with open_text(path) as stream:
            for number, line in enumerate(stream, start=1):
                if not line.strip():
                    continue
                try:
                    value = parse_json(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"line {number} of {path} is not valid JSON ({json_problem(exc)})",
                                       fix="write one JSON object per line") from None
                yield f"line {number} of {path}", value
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    except CorpusError as exc:
        raise _from_corpus_error(exc, path) from None
    except (OSError, EOFError) as exc:
        raise DatasetError(f"cannot read {path} ({exc})", fix="the file is damaged or truncated; fetch it again") \
            from None


def _json(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        data = load_json(path)
    except CorpusError as exc:
        raise _from_corpus_error(exc, path) from None
    if isinstance(data, dict) and _is_title_map(data):
        raise _title_map_given(path, data)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]  # {"version": ..., "data": [...]}, as some releases ship
    if not isinstance(data, list):
        raise DatasetError(f"{path} holds a JSON {type(data).__name__}, not a list of questions",
                           fix="store the questions as a JSON list [{...}, ...] or as JSON lines (.jsonl)")
    for index, value in enumerate(data):
        yield f"record {index + 1} of {path}", value


def _is_title_map(data: dict) -> bool:
    """A corpus of the ``{title: [sentence, ...]}`` or ``{title: text}`` layout (no question in sight)."""
    values = list(itertools.islice(data.values(), 50))
    return bool(values) and "question" not in {str(k).lower() for k in data} and all(
        isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)) for v in values)


def _title_map_given(path: Path, data: dict) -> DatasetError:
    """A corpus {title: [sentences]} given where questions were expected: say so, and where it goes."""
    first = next(iter(data))
    layout = "{title: [sentence, ...]}" if isinstance(data[first], list) else "{title: text}"
    return _corpus_given(path, f"one JSON object mapping {len(data):,} titles to their text ({layout}, "
                               f"first title {str(first)!r:.60})")


def _corpus_given(path: Path, what: str) -> DatasetError:
    """A corpus file given where questions were expected, ``what`` saying how that shows; the fix names both options."""
    as_corpus = usage("corpus", str(path))
    fix = (f"give it as the corpus to search, {as_corpus}, and the questions with {option('dataset') or 'the dataset'}"
           " QUESTION_FILE" if as_corpus else
           "give a question file here (records with 'question' and 'answer'); a corpus is searched, not asked")
    return DatasetError(f"{path} is a corpus (passage) file, not a question file: {what}", fix=fix)


#: How a table's cells may be separated: the one its name says comes first, then the others in use.
SEPARATORS = {",": "','", ";": "';'", "\t": "a tab", "|": "'|'"}


def _header(first_line: str, delimiter: str) -> tuple[str, list[str]]:
    """(separator, column names) of a table's header: the separator its name says, or, when that reading
    has no 'question' column, the first other common separator that gives one (a spreadsheet saved in a
    locale that separates with semicolons)."""
    for candidate in (delimiter, *(d for d in SEPARATORS if d != delimiter)):
        names = [h.strip() for h in next(csv.reader([first_line], delimiter=candidate), [])]
        if "question" in {n.lower() for n in names}:
            return candidate, names
    return delimiter, [h.strip() for h in next(csv.reader([first_line], delimiter=delimiter), [])]


def _table(path: Path, delimiter: str) -> Iterator[tuple[str, Any]]:
    csv.field_size_limit(1 << 30)
    columns = "a header row naming the columns, e.g. question,answer (or answers, as a JSON list)"
    try:
        with open_text(path) as stream:
            first = stream.readline()
            if not first.strip():
                raise DatasetError(f"{path} is empty or has no header row", fix=f"start the file with {columns}")
            delimiter, names = _header(first, delimiter)
            if "question" not in {n.lower() for n in names}:
                rest = [SEPARATORS[d] for d in SEPARATORS if d != delimiter]
                others = ", ".join(rest[:-1]) + " or " + rest[-1]
                raise DatasetError(f"line 1 of {path} (the header) has no 'question' column (found: "
                                   f"{', '.join(names)}) when its cells are separated by {SEPARATORS[delimiter]}, "
                                   f"nor when separated by {others}", fix=f"start the file with {columns}")
            reader = csv.reader(itertools.chain([first], stream), delimiter=delimiter)
            next(reader)
            for row in reader:
                if not row or all(not cell.strip() for cell in row):
                    continue
                where = f"line {reader.line_num} of {path}"
                if len(row) != len(names):
                    raise DatasetError(f"{where} has {len(row)} cells, the header has {len(names)}",
                                       fix="quote cells that hold the separator, and give every row every column")
                yield where, dict(zip(names, row, strict=True))
    except csv.Error as exc:
        raise DatasetError(f"{path} is not a well-formed table ({exc})", fix="re-save it as CSV with a header row") \
            from None
    except UnicodeDecodeError as exc:
        raise _not_utf8(path, exc) from None
    except CorpusError as exc:
        raise _from_corpus_error(exc, path) from None


def iter_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) for every record of a question file, in file order."""
    container = container_of(path)
    if container == "jsonl":
        return _jsonl(path)
    if container == "json":
        return _json(path)
    return _table(path, "," if container == "csv" else "\t")


# --- questions ------------------------------------------------------------------------------------


def _keys(record: Any) -> str:
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}"
    keys = sorted(map(str, record))
    return "fields " + ", ".join(keys[:10]) + (" ..." if len(keys) > 10 else "") if keys else "no fields"


_PASSAGE_KEYS = frozenset({"text", "contents", "passage", "paragraph_text"})


def _corpus_file(path: Path, where: str, record: Any) -> DatasetError | None:
    """A passage file given where questions were expected (a corpus beside its question file): say which is which."""
    keys = {str(k).lower() for k in record} if isinstance(record, dict) else set()
    if not keys & _PASSAGE_KEYS or keys & {"question", "query", "context", "paragraphs", "ctxs"}:
        return None
    return _corpus_given(path, f"its records hold passages ({where}: {_keys(record)}) and no question")


def _undetected(path: Path, where: str, record: Any) -> DatasetError:
    corpus = _corpus_file(path, where, record)
    if corpus is not None:
        return corpus
    fix = "give every record a 'question' field and an 'answer' (or 'answers') field" + format_hint()
    if isinstance(record, dict) and "question" in {str(k).lower() for k in record}:
        return DatasetError(f"{where} has a 'question' field but no 'answer' (nor 'answers') field, so the format "
                            f"of {path} cannot be told", fix=fix)
    return DatasetError(f"cannot tell the question format of {path} from its first record ({where}: "
                        f"{_keys(record)})", fix=fix)


def _reads(name: str, record: dict, index: int) -> bool:
    try:
        PARSERS[name](record, index)
    except (BadRecord, KeyError, TypeError, ValueError, AttributeError):
        return False
    return True


def _formats_reading(record: dict, index: int, shape: str) -> list[str]:
    """The other formats that read this record (the only ones worth suggesting for it): the one its own
    fields point to when that one reads it, else every one that does."""
    own = detect_format(record)
    if own is not None and own != shape and _reads(own, record, index):
        return [own]
    return [name for name in QUESTION_FORMATS if name != shape and _reads(name, record, index)]


def read_questions(path: Path, fmt: str | None = None, *, label: str | None = None,
                   suggest_format: bool = True, detected: bool = False,
                   skipped: list[str] | None = None) -> Iterator[Question]:
    """Questions one by one; ``fmt`` None detects the format from the first record.

    Each question is filed under ``label`` (default: the format's dataset name). ``suggest_format``
    False keeps messages from suggesting another format (a benchmark name fixes its format);
    ``detected`` says ``fmt`` was detected earlier (messages say so). A record with an empty answer
    (``"golden_answers": []``) cannot be scored: with ``skipped`` given it is left out and named there
    (where it is and why), else it stops the reading like any other fault."""
    wanted = check_format(fmt) if fmt else None
    records = iter_records(path)
    shape: str | None = wanted
    for index, (where, record) in enumerate(records):
        if shape is None:
            shape = detect_format(record)
            detected = True
            if shape is None:
                raise _undetected(path, where, record)
        if not isinstance(record, dict):
            raise DatasetError(f"{where} is {_keys(record)}, not an object with a 'question' field",
                               fix="write one JSON object per question")
        try:
            question = PARSERS[shape](record, index)
        except NoAnswer as exc:
            if skipped is not None:
                skipped.append(f"{where} {exc}")
                continue
            raise DatasetError(f"{where} {exc}, so it cannot be scored",
                               fix="give that record its answer, or remove it (an evaluation leaves such records "
                                   "out and counts them)") from None
        except BadRecord as exc:
            how = f"read as {FORMAT_TITLES[shape]}" + (", the format detected from the first record" if detected
                                                        else "")
            others = _formats_reading(record, index, shape) if suggest_format else []
            told = usage("dataset_format", others[0]) if others else None
            hint = (f", or read the file as {' or '.join(FORMAT_TITLES[o] for o in others)}, which reads this "
                    f"record: {told}") if told else ""
            raise DatasetError(f"{where} {exc} ({how})",
                               fix=f"correct that record so it fits the {FORMAT_TITLES[shape]} format" + hint) \
                from None
        if label:
            question.dataset = label
        yield question


def sniff_format(path: Path, fmt: str | None = None) -> tuple[str, bool]:
    """(format, detected?) of a question file, from its first record unless ``fmt`` names it."""
    if fmt:
        return check_format(fmt), False
    for where, record in iter_records(path):
        shape = detect_format(record)
        if shape is None:
            raise _undetected(path, where, record)
        return shape, True
    raise DatasetError(f"{path} holds no questions", fix="add at least one question record")
