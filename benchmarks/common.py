"""What every benchmark script needs alike: the machine it ran on, and where its table goes; and what the
calibration scripts share: their arguments, their model and demo questions, and how they summarise a signal."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

Opened = TypeVar("Opened")


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


def publish(lines: list[str], out: str | Path) -> int:
    """A benchmark's last step: its lines as one results file at ``out`` and on stdout; the exit status 0."""
    text = "\n".join(lines) + "\n"
    write_result(text, out)
    print(text)
    return 0


def calibration_parser(doc: str, *, limit: int, max_length: int) -> argparse.ArgumentParser:
    """The arguments every calibration script takes (the model, how many demo questions, the draft length),
    described by the first paragraph of the script's ``doc``; a script adds its own to the parser."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--model", default="embedded", help="model spec (embedded, gemma3-270m, a folder...)")
    parser.add_argument("--limit", type=int, default=limit)
    parser.add_argument("--max-length", type=int, default=max_length)
    return parser


def open_calibration(args: argparse.Namespace, opener: Callable[[str], Opened]) -> tuple[Opened, list[Any]]:
    """The model of ``--model`` opened by ``opener`` (an engine or a whole runtime) and the first ``--limit``
    demo questions, which every calibration drafts answers to."""
    from explorer.eval.datasets import load_dataset

    opened = opener(args.model)
    return opened, list(load_dataset("demo", limit=args.limit))


def quartiles(values: list[float]) -> str:
    """A signal's spread over the questions: min, quartiles and max."""
    qs = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"min {min(values):.3f} · q1 {qs[0]:.3f} · median {qs[1]:.3f} · q3 {qs[2]:.3f} · max {max(values):.3f}"
