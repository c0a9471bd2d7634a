"""Every relative link in README.md and docs/*.md resolves inside the repository,
and every repository path that the docs and the code comments name exists.

Links: Markdown links `[text](target)` and reference definitions `[label]: target`
are checked; URLs with a scheme (https:, mailto:) and pure anchors (#x) are
not. A target must name an existing file or folder under the repository root
(never a path outside it, e.g. ../shared/...).

Named paths: a token that starts with a top-level folder of the repository
(`TOP_LEVEL`, e.g. `engine/kv_cache.h`, `tests/gpu/`, `bench/cuda/*.cc`,
`engine/loader/model_config.{h,cc}`) in the Markdown pages (code spans and
fenced blocks included) or in a comment of a source file (`SOURCE_GLOBS`) must
name an existing file or folder; a glob must match one at least. A token
glued to something before it (`build/tools/kvserve-client`, `$OUT/...`,
`../shared/...`, `lib/x`) is not a repository path: built outputs live under
build/ and are allowed, and so are the benchmarks' outputs under bench/results/.
"""

from __future__ import annotations

import ast
import glob as globlib
import io
import itertools
import os
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("KVSERVE_SOURCE_DIR") or Path(__file__).resolve().parents[2]).resolve()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")

TOP_LEVEL = ("bench", "chat", "common", "deploy", "docs", "engine", "kernels", "proto",
             "scheduler", "scripts", "server", "tests", "tools")
# A path token: a top-level folder, a slash, then path characters (with
# {a,b} alternatives), not glued to a character that would make it part of a
# longer path, a variable or a word (build/..., ../..., $OUT/..., foo_tests/...).
PATH_TOKEN = re.compile(
    r"(?<![\w./$~@:-])((?:" + "|".join(TOP_LEVEL) + r")/(?:[\w./*+-]|\{[\w.,/*+-]*\})*)")
SOURCE_GLOBS = ("*.cc", "*.h", "*.cu", "*.cuh", "*.py", "*.sh", "*.proto", "CMakeLists.txt")

# A comment that names a missing path on purpose: (file, named path) -> why.
# Keep it empty; a test fails for an entry that is no longer needed.
ALLOWED_MISSING: dict[tuple[str, str], str] = {}
# What the programs write when they run (git-ignored, like build/): named, not
# stored. bench/results/README.md is the one stored file there.
OUTPUT_PREFIXES = ("bench/results/",)


def relative_links(text: str) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", text))  # code is not a link
    targets = INLINE.findall(text) + REFERENCE.findall(text)
    return [t for t in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t)
            and not t.startswith("#")]


# --- the paths that text names ------------------------------------------------

def path_tokens(text: str) -> list[str]:
    """The repository-path-like tokens of a piece of prose or code comment."""
    out = []
    for token in PATH_TOKEN.findall(text):
        token = token.rstrip(".,")  # the sentence's punctuation
        if token.endswith("/..") or "//" in token:
            continue
        out.append(token)
    return out


def expand_braces(token: str) -> list[str]:
    parts = re.split(r"(\{[^{}]*\})", token)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def path_exists(token: str) -> bool:
    for path in expand_braces(token):
        if any(ch in path for ch in "*?["):
            if not globlib.glob(str(ROOT / path)):
                return False
        elif not (ROOT / path).exists():
            return False
    return True


def c_comments(text: str) -> str:
    """The // and /* */ comments of C, C++, CUDA or proto source, string and
    character literals (raw strings included) skipped."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i + 2:j])
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            out.append(text[i + 2:j])
            i = j + 2
        elif c == "R" and text.startswith('R"', i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                i = n if end < 0 else end + len(m.group(1)) + 2
            else:
                i += 1
        elif c in "\"'":
            if c == "'" and i and text[i - 1].isalnum():  # a digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return "\n".join(out)


def hash_comments(text: str) -> str:
    """The # comments of shell or CMake: a # at a line's start or after a
    blank, outside quotes ($#, ${#x} and "#" are not comments)."""
    out = []
    for line in text.splitlines():
        quote = None
        for k, ch in enumerate(line):
            if quote:
                if ch == quote:
                    quote = None
                elif ch == "\\" and quote == '"':
                    continue
            elif ch in "\"'":
                quote = ch
            elif ch == "#" and (k == 0 or line[k - 1] in " \t"):
                out.append(line[k + 1:])
                break
    return "\n".join(out)


def python_comments(text: str) -> str:
    """The # comments and the docstrings of a Python file."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append(tok.string[1:])
        tree = ast.parse(text)
    except (SyntaxError, tokenize.TokenError):
        return hash_comments(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append(doc)
    return "\n".join(out)


def comments_of(path: Path, text: str) -> str:
    if path.suffix in (".cc", ".h", ".cu", ".cuh", ".proto"):
        return c_comments(text)
    if path.suffix == ".py":
        return python_comments(text)
    return hash_comments(text)  # .sh, CMakeLists.txt


def tracked_files(patterns) -> list[Path]:
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", *patterns],
                                check=True, capture_output=True, text=True).stdout
        files = [ROOT / p for p in listed.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        files = [p for pat in patterns for p in ROOT.rglob(pat)
                 if not any(part.startswith(".") or part == "build" for part in
                            p.relative_to(ROOT).parts)]
    return sorted({f for f in files if f.is_file()})


SOURCES = tracked_files(["*.cc", "*.h", "*.cu", "*.cuh", "*.py", "*.sh", "*.proto",
                         "CMakeLists.txt", "*/CMakeLists.txt"])
MARKDOWN = tracked_files(["*.md"]) or PAGES


def missing_paths(rel: str, text: str) -> list[str]:
    return sorted({t for t in path_tokens(text)
                   if not path_exists(t) and (rel, t) not in ALLOWED_MISSING
                   and not t.startswith(OUTPUT_PREFIXES)})


# --- tests --------------------------------------------------------------------

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


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_the_pages_name_exist(page: Path):
    rel = str(page.relative_to(ROOT))
    missing = missing_paths(rel, page.read_text(encoding="utf-8"))
    assert not missing, f"{rel} names paths that do not exist: {missing}"


def test_paths_the_code_comments_name_exist():
    missing = []
    for path in SOURCES:
        rel = str(path.relative_to(ROOT))
        text = path.read_text(encoding="utf-8", errors="replace")
        missing += [f"{rel}: {t}" for t in missing_paths(rel, comments_of(path, text))]
    assert not missing, "comments name paths that do not exist:\n  " + "\n  ".join(missing)


def test_the_allowlist_holds_only_paths_still_missing():
    stale = [f"{f}: {p}" for (f, p) in ALLOWED_MISSING
             if path_exists(p) or not (ROOT / f).is_file()
             or p not in path_tokens(comments_of(ROOT / f, (ROOT / f).read_text()))]
    assert not stale, f"allowlist entries no longer needed: {stale}"


def test_the_checker_finds_missing_paths():
    text = ("see `bench/cuda_attention_bench` and tests/gpu/kv_write_test.cc, "
            "engine/kv_cache.h, engine/loader/model_config.{h,cc}, kernels/cpu/attention*.cc, "
            "tests/gpu/, build/tools/kvserve-client, ../shared/x.md, $OUT/tests/x.log, "
            "tests/unit/<area>, engine/nope.{h,cc}.")
    assert path_tokens(text) == [
        "bench/cuda_attention_bench", "tests/gpu/kv_write_test.cc", "engine/kv_cache.h",
        "engine/loader/model_config.{h,cc}", "kernels/cpu/attention*.cc", "tests/gpu/",
        "tests/unit/", "engine/nope.{h,cc}"]
    assert missing_paths("x.md", text) == [
        "bench/cuda_attention_bench", "engine/nope.{h,cc}", "tests/gpu/kv_write_test.cc"]


def test_the_checker_reads_only_comments():
    cc = ('// names engine/nope_a.h\nconst char* s = "engine/nope_b.h // not a comment";\n'
          "/* engine/nope_c.h */ int x = 1'000; auto r = R\"(engine/nope_d.h)\";\n")
    assert path_tokens(c_comments(cc)) == ["engine/nope_a.h", "engine/nope_c.h"]
    sh = 'echo "engine/nope_e.h # no"  # engine/nope_f.h\nn=$#\n'
    assert path_tokens(hash_comments(sh)) == ["engine/nope_f.h"]
    py = '"""Doc engine/nope_g.h."""\nx = "engine/nope_h.h"  # engine/nope_i.h\n'
    assert sorted(path_tokens(python_comments(py))) == ["engine/nope_g.h", "engine/nope_i.h"]
