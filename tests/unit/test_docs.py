"""The documentation holds together without building it: every page under docs/ is in the nav of
mkdocs.yml (and every nav entry is a page), and every relative link of README.md (the front page
GitHub shows) reaches a file or folder of the repository, and an anchor a heading of it.
`make lint` builds the site strictly too (mkdocs.yml), which checks the pages' own links."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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


def build_site(tmp_path: Path, page: str) -> Path:
    """A one-page site built strictly with mkdocs.yml's hook, in a repository of two files."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(page)
    (tmp_path / "exists.conf").write_text("key=value\n")
    (tmp_path / "TOP.md").write_text("# Top\n\n[the config](exists.conf)\n")
    (tmp_path / "docs" / "top.md").symlink_to("../TOP.md")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nstrict: true\nvalidation:\n  links:\n    not_found: warn\n"
        f"hooks:\n  - {ROOT / 'mkdocs_hooks.py'}\nnav:\n  - index.md\n  - top.md\n"
    )
    build(load_config(str(tmp_path / "mkdocs.yml")))
    return tmp_path / "site"


def test_links_to_repository_files_are_checked_and_served(tmp_path: Path) -> None:
    """A page's link to a repository file outside docs/ is served from the site; one to a
    top-level file symlinked into docs/ leads to its page, and that page's own links are read
    from the file's place."""
    site = build_site(tmp_path, "# Home\n\n[config](../exists.conf) and [top](../TOP.md)\n")
    assert (site / "repository" / "exists.conf").read_text() == "key=value\n"
    home = (site / "index.html").read_text()
    assert 'href="repository/exists.conf"' in home and 'href="top/"' in home
    assert 'href="../repository/exists.conf"' in (site / "top" / "index.html").read_text()


def test_a_link_to_a_missing_repository_file_fails_the_strict_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mkdocs.exceptions import Abort

    with pytest.raises(Abort, match="in strict mode"):
        build_site(tmp_path, "# Home\n\n[gone](../missing.conf)\n")
    assert "links '../missing.conf', which is not in the repository" in caplog.text
