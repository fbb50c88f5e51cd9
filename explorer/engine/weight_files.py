"""A look at a model folder's safetensors files before any weight is loaded.

A safetensors file opens with an 8-byte little-endian header length, then a JSON header that lists
every tensor with its byte range in the data that follows. Reading just that much tells a damaged,
truncated or foreign file (a failed download, an HTML error page saved under the weights' name)
from a real one in milliseconds, so the user gets the file's name and what is wrong with it
instead of the loader's traceback half-way through a load.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from explorer.errors import ModelError

#: A header longer than this is not a header (real ones are kilobytes; the format caps them at 100 MB).
MAX_HEADER = 100_000_000
_FIX = "the file is damaged, truncated or not model weights: download or convert the model again"


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with one safetensors file, or None when its header and sizes are sound."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        start = stream.read(8)
        if len(start) < 8:
            return f"it has {size} bytes, too few for a safetensors header"
        length = struct.unpack("<Q", start)[0]
        if length == 0 or length > min(MAX_HEADER, size - 8):
            return f"its header claims {length:,} bytes but the file has {size:,}"
        raw = stream.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "its header is not the JSON a safetensors file begins with"
    if not isinstance(header, dict):
        return "its header is not the JSON object a safetensors file begins with"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return f"the header entry for tensor {name!r} has no valid data offsets"
        end = max(end, offsets[1])
    if 8 + length + end > size:
        return f"its tensors need {8 + length + end:,} bytes, the file has {size:,} (truncated)"
    return None


def check_safetensors(folder: Path) -> None:
    """Raise a ModelError naming the first safetensors file of ``folder`` that cannot be real weights."""
    for path in sorted(folder.glob("*.safetensors")):
        try:
            problem = safetensors_problem(path)
        except OSError as exc:
            raise ModelError(f"cannot read the weights ({exc.strerror or exc})", where=str(path),
                             fix="check the file's permissions") from None
        if problem is not None:
            raise ModelError(f"{path.name} is not a valid safetensors file: {problem}", where=str(path), fix=_FIX)
