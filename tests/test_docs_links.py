"""The README is a short front door and every page it leads to is there.

Checks, without network: every relative link and image in README.md and docs/*.md names a file
that exists (and an existing heading when it carries a #anchor), the README stays within 15,000
characters, and its first lines give the two set-up commands.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_LIMIT = 15_000

# [text](target) and ![alt](target); the alt text may hold brackets of its own but no newline run.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The page without code blocks and inline code, where bracketed text is not a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = _anchor(match.group(1))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def _relative_links(path: Path) -> list[str]:
    targets = LINK.findall(_prose(path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


def test_link_pattern_finds_links_images_and_anchors() -> None:
    text = "See [a](docs/a.md#x-y), ![pic [1]](shots/p.png) and [web](https://e.org); `[no](code.md)`."
    assert _relative_links_of(text) == ["docs/a.md#x-y", "shots/p.png"]
    assert _anchor("Large corpora (DPR `psgs_w100`, 21M)") == "large-corpora-dpr-psgs_w100-21m"


def _relative_links_of(text: str) -> list[str]:
    return [t for t in LINK.findall(_prose(text)) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_readme_is_a_short_front_door() -> None:
    size = len((ROOT / "README.md").read_text(encoding="utf-8"))
    assert size <= README_LIMIT, f"README.md has {size} characters; move detail into a docs/ page"


def test_readme_opens_with_the_two_set_up_commands() -> None:
    head = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:12])
    for command in ("make run", "make test"):
        assert re.search(rf"^{command}\b", head, re.M), f"README.md's first lines lack `{command}`"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("run", "test"):
        assert re.search(rf"^{target}:", makefile, re.M), f"Makefile has no `{target}` target"


def test_every_docs_page_is_on_the_readme_map() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _relative_links(ROOT / "README.md")}
    unlisted = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlisted, f"docs pages missing from README.md's docs map: {unlisted}"
