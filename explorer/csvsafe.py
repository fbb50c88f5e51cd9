"""CSV cells that a spreadsheet shows as text, never runs as a formula.

Exports carry text from users, models and corpora (questions, answers, run names, tags). A cell
that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to Excel,
LibreOffice and Google Sheets (``=HYPERLINK(...)``, ``@SUM(...)``, DDE payloads), so, as OWASP
advises against CSV injection, such a cell gets a leading single quote, which spreadsheets show
as text. The full-width forms of those signs are treated the same, since some spreadsheets fold
them. Numbers stay numbers: a cell that is only a number (``-0.5``, ``+3``, ``1e-6``) cannot
be a formula and is left as it is, so numeric columns still sort and sum.

A carriage return inside a cell becomes a line feed: a writer whose line ends are ``\n`` does
not quote a cell with a bare ``\r``, and a spreadsheet would start a new row there, whose first
cell is a formula again. A cell with a line feed is always quoted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def safe_cell(value: Any) -> Any:
    """``value`` with a formula-starting text neutralised; numbers and other values unchanged."""
    if not isinstance(value, str):
        return value
    if value.lstrip(" ").startswith(FORMULA_STARTS) and not _NUMBER.match(value.strip()):
        value = "'" + value
    return value.replace("\r\n", "\n").replace("\r", "\n")


def safe_row(values: Iterable[Any]) -> list[Any]:
    return [safe_cell(v) for v in values]
