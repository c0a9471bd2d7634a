"""The backends' status is stated in one place, and the files that mention it agree.

The status page is docs/cuda.md, section "Backend status": a table with one row
per backend (`| cpu | ... |`, `| cuda | ... |`). README.md, deploy/README.md,
the Dockerfile's comments and the GPU Kubernetes overlay must point at that page
and must not state the contrary (that the CUDA backend does not exist, has not
run on a GPU, or that the daemon refuses --backend=cuda outright).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("KVSERVE_SOURCE_DIR") or Path(__file__).resolve().parents[2]).resolve()
STATUS_PAGE = "docs/cuda.md"
STATUS_HEADING = "## Backend status"
# The files that mention the backends' status, and how each points at the page.
POINTERS = {
    "README.md": "docs/cuda.md#backend-status",
    "deploy/README.md": "../docs/cuda.md#backend-status",
    "Dockerfile": 'docs/cuda.md, "Backend status"',
    "deploy/k8s/overlays/gpu/kustomization.yaml": 'docs/cuda.md, "Backend status"',
}
# Statements that contradict a CUDA backend that serves on a GPU (matched
# case-insensitively, across line breaks).
CONTRARY = [
    r"not\s+(?:yet\s+)?(?:been\s+)?run\s+on\s+a\s+GPU",
    r"never\s+run\s+on\s+(?:a|one)",
    r"has\s+no\s+CUDA\s+backend",
    r"CUDA\s+backend\s+does\s+not\s+exist",
    r"no\s+CUDA\s+backend\s+yet",
    r"until\s+the\s+(?:CUDA\s+)?(?:one|backend)\s+(?:exists|lands)",
    r"when\s+the\s+backend\s+lands",
    r"refuses\s+`?--backend=cuda",
    r"--backend=cuda`?\s+is\s+refused",
]


def status_rows(text: str) -> dict[str, list[str]]:
    """The status table of the status page: backend -> its other cells."""
    start = text.index(STATUS_HEADING)
    end = text.find("\n## ", start + len(STATUS_HEADING))
    rows = {}
    for line in text[start:end if end > 0 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] in ("cpu", "cuda"):
            rows[cells[0]] = cells[1:]
    return rows


def contrary_statements(text: str) -> list[str]:
    flat = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)  # comment lines joined
    return [m.group(0) for pat in CONTRARY for m in re.finditer(pat, flat, re.IGNORECASE)]


def test_the_status_page_states_each_backend():
    rows = status_rows((ROOT / STATUS_PAGE).read_text(encoding="utf-8"))
    assert set(rows) == {"cpu", "cuda"}, rows
    assert rows["cuda"][0].startswith("serves on a GPU"), rows["cuda"]
    assert re.search(r"H100|H200", rows["cuda"][1]), rows["cuda"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", rows["cuda"][2]), rows["cuda"]


@pytest.mark.parametrize("name", sorted(POINTERS))
def test_the_file_points_at_the_status_page(name: str):
    text = (ROOT / name).read_text(encoding="utf-8")
    assert POINTERS[name] in text, f"{name} does not point at {STATUS_PAGE}: {POINTERS[name]!r}"


@pytest.mark.parametrize("name", sorted([*POINTERS, STATUS_PAGE, "docs/architecture.md",
                                         "docs/engine.md", "docs/server.md"]))
def test_no_file_states_the_contrary(name: str):
    found = contrary_statements((ROOT / name).read_text(encoding="utf-8"))
    assert not found, f"{name} contradicts {STATUS_PAGE} ('Backend status'): {found}"


def test_the_checker_finds_contrary_statements():
    bad = ("**The CUDA backend has not yet run on a GPU**: see docs/cuda.md\n"
           "# kvserve has no CUDA backend yet: --backend=auto serves on the CPU backend\n"
           "# of the GPU node (--backend=cuda is refused) until it lands.\n"
           "The daemon refuses `--backend=cuda`; ... when the backend\nlands.\n")
    assert len(contrary_statements(bad)) == 6
    good = ("`--backend=cuda` insists on the GPU, and otherwise exits with `--backend=cuda: ...`;"
            " the CUDA backend's tests pass on an H100.")
    assert contrary_statements(good) == []
    table = ("## Backend status\n\n| backend | status | where | date |\n|---|---|---|---|\n"
             "| cpu | serves | a VM | 2026-12-01 |\n| cuda | serves on a GPU | H200 | 2026-11-27 |\n"
             "\n## Next\n| cuda | not this one | | |\n")
    assert status_rows(table) == {"cpu": ["serves", "a VM", "2026-12-01"],
                                  "cuda": ["serves on a GPU", "H200", "2026-11-27"]}
