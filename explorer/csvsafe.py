"""CSV cells that a spreadsheet shows as text, never runs as a formula, however it splits the file.

Exports carry text from users, models and corpora (questions, answers, run names, tags). A cell
that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to Excel,
LibreOffice and Google Sheets (``=HYPERLINK(...)``, ``@SUM(...)``, DDE payloads), so, as OWASP
advises against CSV injection, such a cell gets a leading single quote, which spreadsheets show
as text. The full-width forms of those signs are treated the same, since some spreadsheets fold
them.

A spreadsheet does not always read the file as comma-separated: in many locales it splits on
semicolons, some readers on pipes, and a pasted row splits on tabs. Then ``0x1;=1`` becomes two
cells, the second a formula, and quoting the whole cell does not help, because the reader ignores
quotes that do not open a cell of its own. So every piece of a cell that follows a comma, a
semicolon, a tab, a pipe or a line break and would start a formula gets the quote too
(``0x1;'=1``): each reading then sees text. A piece that opens with double quotes (``x;"=1+13"``)
is judged by what follows them, since that reading takes them as the quotes of a cell of its own.
Such a piece is marked even when it looks like a number (``x;+2``), since in the other reading
its cell runs on to the next separator, over the following cells. Numbers stay numbers:
a whole cell that is only a number (``-0.5``, ``+3``, ``1e-6``) cannot be a formula and is left
as it is, so numeric columns still sort and sum.

A carriage return inside a cell becomes a line feed: a writer whose line ends are ``\\n`` does
not quote a cell with a bare ``\\r``, and a spreadsheet would start a new row there, whose first
cell is a formula again. A cell with a line feed is always quoted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
#: Where a spreadsheet may begin a new cell inside the text of one: the separators of the common
#: readings (comma, semicolon, tab, pipe) and a line break.
SEPARATORS = re.compile(r"([,;\t|\n])")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _starts_formula(piece: str) -> bool:
    """Whether ``piece`` starts a formula, also where a reading takes its opening quotes as a quoted cell's."""
    return piece.lstrip(' "').startswith(FORMULA_STARTS)


def safe_cell(value: Any) -> Any:
    """``value`` with every formula-starting piece neutralised; numbers and other values unchanged."""
    if not isinstance(value, str):
        return value
    lead = "'" if _starts_formula(value) and not _NUMBER.match(value.strip()) else ""
    parts = SEPARATORS.split(value.replace("\r\n", "\n").replace("\r", "\n"))
    # parts alternate: text, separator, text, ...; the first text is covered by ``lead`` (a whole-cell number
    # needs none: it holds no separator, so no reading starts a cell inside it)
    for index in range(2, len(parts), 2):
        if _starts_formula(parts[index]):
            parts[index] = "'" + parts[index]
    return lead + "".join(parts)


def safe_row(values: Iterable[Any]) -> list[Any]:
    return [safe_cell(v) for v in values]
