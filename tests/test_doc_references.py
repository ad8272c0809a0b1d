"""Every Markdown file the repository's code and docs point at exists, and so does the section an anchor names.

Two kinds of reference are checked in the tracked source and documentation files:

- a mention of a ``.md`` path in any text (a docstring's ``methods/FORMULAS.md#sdar``, a YAML comment's
  ``README.md#how-the-tiny-profile-is-sized``): it resolves relative to the file or to the repository root. Bare
  lower-case names without a folder (``main.md``) are output files the code writes, not references, and are
  skipped; upper-case names (``README.md``) and anything with a folder are checked.
- a relative link in Markdown, ``[text](target#anchor)``: it resolves relative to the Markdown file, as a
  renderer does.

An anchor must match a heading of the target (GitHub's slug: lower case, punctuation dropped, spaces to
hyphens) or an explicit ``<a id="...">``.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml"}
SCANNED_NAMES = {"Snakefile", "Makefile"}

# a path ending in .md, not inside a URL (no ":" or "/" right before it), with an optional #anchor
MD_MENTION = re.compile(r"(?<![\w./:-])(/?(?:[\w.-]+/)*[\w.-]*\w\.md)(?:#([\w-]+))?(?![\w/])")
MD_LINK = re.compile(r"\[[^\]]*\]\(\s*([^)\s]+)\s*\)")
HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class BrokenReference:
    file: str
    line: int
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.target}: {self.reason}"


def tracked_files(root: Path) -> list[Path]:
    """The files git tracks under ``root`` (a checkout), or every file below it when it is not one."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True)
        paths = [root / p for p in listing.stdout.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in root.rglob("*") if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts]
    return [p for p in paths if p.is_file() and (p.suffix in SCANNED_SUFFIXES or p.name in SCANNED_NAMES)]


def github_slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Heading slugs (numbered like GitHub's when repeated) and explicit anchors, outside code blocks."""
    found: set[str] = set(EXPLICIT_ANCHOR.findall(markdown))
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_code = not in_code
            continue
        heading = HEADING.match(line)
        if in_code or not heading:
            continue
        slug = github_slug(heading.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def _check_target(path: Path, anchor: str | None) -> str | None:
    """Why ``path#anchor`` is broken, or None."""
    if not path.exists():
        return "no such file"
    if anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
        return f"no section #{anchor} in {path.name}"
    return None


def _resolve(candidates: list[Path], anchor: str | None) -> str | None:
    reasons = [_check_target(path, anchor) for path in candidates]
    return None if None in reasons else next((r for r in reasons if r != "no such file"), "no such file")


def _is_reference(mention: str) -> bool:
    stem = Path(mention).stem
    return "/" in mention or stem == stem.upper()


def broken_references(root: Path, files: list[Path]) -> list[BrokenReference]:
    broken = []
    for file in files:
        text = file.read_text(encoding="utf-8", errors="replace")
        name = file.relative_to(root).as_posix()
        for number, line in enumerate(text.splitlines(), start=1):
            for match in MD_MENTION.finditer(line):
                mention, anchor = match.group(1), match.group(2)
                if not _is_reference(mention):
                    continue
                if mention.startswith("/"):
                    reason = "an absolute path; cite a file of the repository by its path from the root"
                else:
                    reason = _resolve([file.parent / mention, root / mention], anchor)
                if reason:
                    broken.append(BrokenReference(name, number, match.group(0), reason))
            if file.suffix != ".md":
                continue
            for target in MD_LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                    continue
                path_part, _, anchor = target.partition("#")
                reason = _check_target(file.parent / path_part if path_part else file, anchor or None)
                if reason == "no such file":
                    reason += f" in {file.parent.relative_to(root).as_posix() or '.'}/ (a link resolves from its file)"
                if reason:
                    broken.append(BrokenReference(name, number, target, reason))
    return sorted(set(broken), key=lambda b: (b.file, b.line, b.target))


def test_every_referenced_markdown_file_exists():
    own = Path(__file__).resolve()  # its fixtures name missing files on purpose
    files = [f for f in tracked_files(ROOT) if f.resolve() != own]
    assert len(files) > 50, "found too few tracked files: is this a checkout?"
    broken = broken_references(ROOT, files)
    assert not broken, "references to missing Markdown files or sections:\n" + "\n".join(map(str, broken))


@pytest.fixture
def fixture_repo(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "docs" / "SPEC.md").write_text(
        "# Spec\n\n## The loss\n\n```\n## not a heading\n```\n\n## The loss\n\n<a id=\"custom\"></a>\n"
    )
    (tmp_path / "pkg" / "README.md").write_text("# Pkg\n\n[spec](../docs/SPEC.md#the-loss-1) [up](../docs/)\n")
    return tmp_path


def _broken_in(root: Path, name: str, text: str) -> list[str]:
    path = root / name
    path.write_text(text)
    return [b.target for b in broken_references(root, [path])]


def test_fixture_resolves_from_the_file_and_from_the_root(fixture_repo):
    ok = ("see docs/SPEC.md#the-loss, docs/SPEC.md#custom and README.md (pkg/README.md beside this file); "
          "outputs like tables/main.csv or main.md are not references; https://example.org/x/GONE.md is a URL\n")
    assert _broken_in(fixture_repo, "pkg/mod.py", ok) == []
    assert _broken_in(fixture_repo, "pkg/README.md", (fixture_repo / "pkg" / "README.md").read_text()) == []


@pytest.mark.parametrize("text, target", [
    ("see docs/GONE.md for the formula", "docs/GONE.md"),
    ("(METHODS.md §SDAR)", "METHODS.md"),
    ("docs/SPEC.md#not-a-section", "docs/SPEC.md#not-a-section"),
    ("docs/SPEC.md#not-a-heading", "docs/SPEC.md#not-a-heading"),  # inside a code block
    ("/work/shared/DESIGN.md", "/work/shared/DESIGN.md"),
])
def test_fixture_fails_on_a_missing_file_or_section(fixture_repo, text, target):
    assert _broken_in(fixture_repo, "pkg/mod.py", f'"""{text}"""\n') == [target]


def test_fixture_markdown_links_resolve_from_the_markdown_file(fixture_repo):
    text = "[a](docs/SPEC.md) [b](#pkg) [c](#nowhere) [d](https://example.org/NOPE.md)\n"
    # from pkg/, "docs/SPEC.md" does not exist (a renderer would not find it); #pkg is this file's own heading
    assert _broken_in(fixture_repo, "pkg/README.md", "# Pkg\n" + text) == ["#nowhere", "docs/SPEC.md"]
