"""Errors that reach users.

Every failure a user can cause (a bad path, a malformed file, an invalid parameter) is raised
as an :class:`ExplorerError` carrying what went wrong, where, and how to fix it, so the CLI and
the web app can show one clear message instead of a traceback.
"""

from __future__ import annotations

import json
import re
from typing import Any


class ExplorerError(Exception):
    """A problem the user can fix; ``str()`` gives the full message."""

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        parts = [self.what if self.where is None else f"{self.where}: {self.what}"]
        if self.fix:
            parts.append(f"Fix: {self.fix}")
        return " ".join(parts)


class ConfigError(ExplorerError):
    """A configuration value is outside its allowed range or of the wrong type."""


class CorpusError(ExplorerError):
    """A corpus file is missing or malformed; ``where`` names file and line."""


class ModelError(ExplorerError):
    """A model cannot be found, loaded or used as asked."""


class DatasetError(ExplorerError):
    """A benchmark dataset file is missing or malformed."""


class NotFound(ExplorerError):
    """A named thing (a stored run, an evaluation) does not exist; the web API answers it with 404."""


# An absolute path (POSIX, home-relative or Windows) inside a message; not the '//' of a URL.
_PATH = re.compile(r"(?<![\w.:/~-])(?:~|[A-Za-z]:)?[/\\](?:[^\s'\"()\[\]<>,;|]+[/\\])*([^\s'\"()\[\]<>,;|/\\]*)")


def hide_paths(text: str | None) -> str | None:
    """``text`` with every absolute path cut to its last part (``/srv/x/corpus.jsonl:12`` -> ``corpus.jsonl:12``)."""
    if not text:
        return text
    return _PATH.sub(lambda m: m.group(1) or "(a server folder)", text)


def public_message(exc: ExplorerError, where: str | None = None) -> str:
    """The message for someone across the network: what and how to fix it, without the server's file system.

    A ``where`` that is a server path (the run database, a model folder) is replaced by ``where``
    (a name the client knows, such as ``run_id``) or dropped; paths inside the text keep only
    their last part. The full message belongs in the server's log.
    """
    place = exc.where
    if place and hide_paths(place) != place:
        place = where
    return ExplorerError(hide_paths(exc.what) or "", where=place, fix=hide_paths(exc.fix)).message


class NestedTooDeeply(json.JSONDecodeError):
    """JSON whose arrays or objects nest deeper than the parser follows (json raises RecursionError)."""

    def __init__(self, doc: str) -> None:
        super().__init__("arrays or objects nested too deeply to read", doc, 0)


def parse_json(text: str | bytes) -> Any:
    """``json.loads``, with a value nested too deeply for the parser raised as a JSONDecodeError
    (:class:`NestedTooDeeply`) like any other malformed text, so every caller's message covers it."""
    try:
        return json.loads(text)
    except RecursionError:
        raise NestedTooDeeply(text if isinstance(text, str) else text.decode("utf-8", "replace")) from None


def check_text(text: str, where: str) -> str:
    """Refuse text holding a lone surrogate (``\\udcff`` from a JSON escape or a non-UTF-8 argument): it is
    not a character, so it could be neither stored nor shown. Returns ``text``."""
    try:
        text.encode("utf-8")  # the only characters UTF-8 cannot encode are surrogates
    except UnicodeEncodeError as exc:
        raise ExplorerError(f"the text holds an invalid character (a lone surrogate, U+{ord(text[exc.start]):04X}, "
                            f"at character {exc.start + 1})", where=where,
                            fix="send valid Unicode text (UTF-8): remove or replace that character") from None
    return text


#: Unicode categories that show nothing on their own: controls (NUL), format characters (zero-width space
#: and joiners, byte-order mark), surrogates, private-use and unassigned code points, separators and marks.
_INVISIBLE = ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp", "Mn", "Me")


def has_visible(text: str) -> bool:
    """Whether ``text`` holds a character that shows: a question of only NUL or zero-width characters is empty."""
    import unicodedata

    return any(unicodedata.category(ch) not in _INVISIBLE for ch in text)


def check_question(text: str | None, where: str, fix: str) -> str:
    """``text`` stripped, refused when it is empty, only invisible characters, or holds a lone surrogate."""
    text = (text or "").strip()
    if not text:
        raise ExplorerError("the question is empty", where=where, fix=fix)
    if not has_visible(text):
        raise ExplorerError(f"the question is empty: its {len(text)} character(s) are all invisible (NUL, "
                            "zero-width or other control characters)", where=where, fix=fix)
    return check_text(text, where)


def json_problem(exc: json.JSONDecodeError, *, column: bool = True) -> str:
    """json's reason, with its column unless the caller names the position itself.

    json's own text may already end in "at" ("Invalid control character at"): it is cut, so the
    message never says "at at column".
    """
    reason = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
    return f"{reason} at column {exc.colno}" if column and not isinstance(exc, NestedTooDeeply) else reason
