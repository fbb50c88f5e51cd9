"""Forks: a run replayed exactly up to a point of its parent, then continued live with one change.

:mod:`plan` says what a fork changes and where, :mod:`replay` serves the parent's trace until
then, :mod:`run` runs one (``fork_run``), :mod:`diff` compares a fork with its parent.
"""

from explorer.forks.plan import CHANGES, ForkChange, ForkPlan, ForkPoint, parse_at, resolve
from explorer.forks.run import check_compatible, fork_run

__all__ = ["CHANGES", "ForkChange", "ForkPlan", "ForkPoint", "check_compatible", "fork_run", "parse_at", "resolve"]
