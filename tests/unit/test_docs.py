"""The documentation holds together without building it: every page under docs/ is in the nav of
mkdocs.yml (and every nav entry is a page), and every relative link of README.md (the front page
GitHub shows) reaches a file or folder of the repository, and an anchor a heading of it.
`make lint` builds the site strictly too (mkdocs.yml), which checks the pages' own links."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def nav_pages(entries: list[Any]) -> Iterator[str]:
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from nav_pages(value)
        elif not re.match(r"[a-z]+://", value):
            yield value


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = list(nav_pages(config["nav"]))
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages - set(nav) == set(), "pages missing from the nav of mkdocs.yml"
    assert set(nav) - pages == set(), "nav entries with no page under docs/"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {slug(m) for m in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_the_readme_links_reach_files_of_the_repository() -> None:
    readme = ROOT / "README.md"
    targets = LINK.findall(readme.read_text())
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert any(t.startswith("docs/") for t in local), "README.md links no page of docs/"
    for target in local:
        path, _, anchor = target.partition("#")
        file = (ROOT / path) if path else readme
        assert file.exists(), f"README.md links {target}, which does not exist"
        if anchor:
            assert anchor in anchors(file), f"README.md links {target}: no such heading"
