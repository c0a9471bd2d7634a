"""Every relative link in README.md and docs/*.md resolves inside the repository.

Markdown links `[text](target)` and reference definitions `[label]: target`
are checked; URLs with a scheme (https:, mailto:) and pure anchors (#x) are
not. A target must name an existing file or folder under the repository root
(never a path outside it, e.g. ../shared/...).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("KVSERVE_SOURCE_DIR") or Path(__file__).resolve().parents[2]).resolve()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def relative_links(text: str) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", text))  # code is not a link
    targets = INLINE.findall(text) + REFERENCE.findall(text)
    return [t for t in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t)
            and not t.startswith("#")]


def test_the_pages_exist():
    assert (ROOT / "README.md").is_file()
    assert (ROOT / "docs" / "architecture.md").is_file()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page: Path):
    broken = []
    for target in relative_links(page.read_text(encoding="utf-8")):
        path = target.split("#", 1)[0]
        resolved = (page.parent / path).resolve()
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(f"{target} (no such file)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_the_readme_links_the_architecture_map():
    assert "docs/architecture.md" in relative_links((ROOT / "README.md").read_text())


def test_the_checker_finds_broken_links():
    text = ("[a](../shared/DESIGN.md) [b](docs/nope.md) [c](https://x.org) [d](#anchor) "
            "`[e](code.md)`\n[ref]: other.md\n```\n[f](fenced.md)\n```\n")
    assert relative_links(text) == ["../shared/DESIGN.md", "docs/nope.md", "other.md"]
