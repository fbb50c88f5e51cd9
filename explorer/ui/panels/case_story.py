"""A recorded case study's caption: the paper's figure, what this model did, whether that is the
paper's story, and a link to the one thing to look at in the run shown below it.

Everything in a caption that comes from a model, a corpus or a question goes through :func:`esc`.
The link carries the path to its target as data (``data-look``, a JSON list of ``[attribute,
value]`` steps from the run's ``<article data-run>`` down); ``assets/explorer.js`` turns it into a
selector, scrolls the element into view, opens the ``<details>`` around it and highlights it.
"""

from __future__ import annotations

import json

from explorer.ui.case_stories import Caption
from explorer.ui.html import esc, help_link


def look_link(caption: Caption) -> str:
    if caption.look is None:
        return ""
    path = json.dumps(caption.look.path(), ensure_ascii=False)
    return (f'<p class="dre-story-look"><b>Look at</b> <a href="#" class="dre-look" data-look="{esc(path)}" '
            f'data-look-run="{esc(caption.look.run_id)}">{esc(caption.look.label)}</a> '
            "(highlighted in the run below).</p>")


def render(caption: Caption | None) -> str:
    """The caption as a panel ("" when the recorded run has none)."""
    if caption is None:
        return ""
    did = " ".join([*caption.facts, *(c.text for c in caption.claims if c.holds)])
    reproduced = "none" if not caption.beats else ("all" if all(b.holds for b in caption.beats) else
                                                  "some" if any(b.holds for b in caption.beats) else "no")
    return (f'<section class="dre-root dre-story" data-story="{esc(caption.key)}" data-reproduces="{reproduced}" '
            f'aria-label="{esc(caption.title)}">'
            f'<h3>{esc(caption.title)}{help_link("story")}</h3>'
            f'<p class="dre-story-paper"><b>In the paper</b> ({esc(caption.paper)}, {esc(caption.figure)}): '
            f"{esc(caption.story)}</p>"
            f'<p class="dre-story-model"><b>On {esc(caption.model)}</b>: {esc(did)}</p>'
            f'<p class="dre-story-verdict"><b>Does it reproduce the paper?</b> {esc(caption.verdict)}</p>'
            f"{look_link(caption)}</section>")
