"""The embedders a visitor may choose in Settings: the bundled one and the one the server was started with.

The Embedder box is text a visitor types, and the server opens what it names. Were it any folder
of the server, its answers ("not a model folder" against "no such folder") would map the
server's folders for anyone, and naming the language model's own folder would load it a second
time as a sentence encoder. So the page offers only names (:func:`page_embedders`): ``embedded``
(all-MiniLM-L6-v2, shipped with the app) and the name of ``--embedder`` when the server was started
with one; any other text gets one and the same refusal, before anything on disk is looked at,
and the box never shows a server path.
"""

from __future__ import annotations

from explorer.errors import ExplorerError
from explorer.retrieval.embeddings import EMBEDDED_SPECS, ENCODER_NAME
from explorer.ui.runs.controller import given_name

BUNDLED = "embedded"


def page_embedders(started: str | None) -> dict[str, str]:
    """Name shown on the page -> what the retriever opens: the bundled encoder, and ``started`` (``--embedder``)."""
    choices = {BUNDLED: BUNDLED}
    started = (started or "").strip()
    if started and started not in EMBEDDED_SPECS:
        choices[given_name(started)] = started
    return choices


def shown_embedder(started: str | None) -> str:
    """What the Embedder box shows when the page opens: the server's embedder by name."""
    return list(page_embedders(started))[-1]


def page_embedder(text: str | None, choices: dict[str, str]) -> str | None:
    """The embedder the page asked for (None: the bundled default), or the one refusal for anything else."""
    text = (text or "").strip()
    if text in choices:
        return None if choices[text] == BUNDLED else choices[text]
    if text in EMBEDDED_SPECS:
        return None
    offered = ", ".join(f"{name} ({ENCODER_NAME})" if name == BUNDLED else name for name in choices)
    quoted = text[:80] + ("…" if len(text) > 80 else "")
    raise ExplorerError(f"'{quoted}' is not an embedder this server offers", where="Embedder",
                        fix=f"choose {offered}; the server's operator sets another with --embedder when starting "
                            "the app")
