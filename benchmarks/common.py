"""What every benchmark script needs alike: the machine it ran on, and where its table goes."""

from __future__ import annotations

import sys
from pathlib import Path


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (a results file is only comparable with its machine named)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def write_result(text: str, out: str | Path) -> None:
    """Write a results table to ``out`` (``-`` keeps it on stdout only), creating its folder."""
    if str(out) == "-":
        return
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text, encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)
