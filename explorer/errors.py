"""Errors that reach users.

Every failure a user can cause (a bad path, a malformed file, an invalid parameter) is raised
as an :class:`ExplorerError` carrying what went wrong, where, and how to fix it, so the CLI and
the web app can show one clear message instead of a traceback.
"""

from __future__ import annotations


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
