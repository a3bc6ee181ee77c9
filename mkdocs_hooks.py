"""mkdocs hook: links from the docs to the repository's own files, checked and served.

The pages link repository files by their path in the repository (`../../deploy/nginx/...`,
`../BENCHMARKS.md`), so the links work on GitHub as written. mkdocs knows only `docs/`; here a
link to a file that is also a page (BENCHMARKS.md and RELIABILITY.md are symlinked into `docs/`)
becomes a link to that page, a link to another file or folder of the repository is checked to
exist (a warning otherwise, which fails the strict build) and points at a copy put into the site
under `repository/` (git-tracked files only), and the links of a page that is a symlink to a file
outside `docs/` are read from the file's own place.
"""

from __future__ import annotations

import html
import logging
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.repository_links")

#: Where copies of the linked repository files go in the site.
SOURCE_DIR = "repository"
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"[a-zA-Z][a-zA-Z+.-]*:")


def on_files(files: Files, config: Any) -> Files:
    """Add a copy of every repository file or folder a page links (and a folder's listing)."""
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    pages = {Path(f.abs_src_path or "").resolve() for f in files.documentation_pages()}
    wanted: set[Path] = set()
    for real in pages:
        for _, resolved in _links(real.read_text(encoding="utf-8"), real):
            if resolved not in pages and _in_repository(resolved, root, docs):
                wanted.add(resolved)
    for path in sorted(wanted):
        relative = path.relative_to(root).as_posix()
        if path.is_file():
            _add(files, File.generated(config, f"{SOURCE_DIR}/{relative}", abs_src_path=str(path)))
            continue
        tracked = _tracked(root, relative)
        for name in tracked:
            _add(
                files, File.generated(config, f"{SOURCE_DIR}/{name}", abs_src_path=str(root / name))
            )
        listing = sorted(os.path.relpath(name, relative) for name in tracked)
        items = "".join(
            f'<li><a href="{html.escape(n)}">{html.escape(n)}</a></li>' for n in listing
        )
        body = f"<!doctype html><title>{html.escape(relative)}/</title><ul>{items}</ul>\n"
        _add(files, File.generated(config, f"{SOURCE_DIR}/{relative}/index.html", content=body))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    pages = {Path(f.abs_src_path or "").resolve(): f.src_uri for f in files.documentation_pages()}
    real = Path(page.file.abs_src_path or "").resolve()
    here = Path(page.file.src_uri).parent

    def relink(match: re.Match[str]) -> str:
        target = match.group(1)
        if _skipped(target):
            return match.group(0)
        path, hashmark, anchor = target.partition("#")
        resolved = Path(os.path.normpath(real.parent / path))
        if resolved in pages:
            new = os.path.relpath(pages[resolved], here)
        elif resolved.is_relative_to(docs):
            new = os.path.relpath(resolved, docs / here)
        elif _in_repository(resolved, root, docs):
            relative = resolved.relative_to(root).as_posix()
            new = os.path.relpath(f"{SOURCE_DIR}/{relative}", here)
            new += "/index.html" if resolved.is_dir() else ""
        else:
            log.warning(
                "Doc file '%s' links '%s', which is not in the repository",
                page.file.src_uri,
                target,
            )
            return match.group(0)
        return f"]({new}{hashmark}{anchor})"

    return "".join(_outside_fences(markdown, lambda line: LINK.sub(relink, line)))


def _links(markdown: str, real: Path) -> Iterator[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []

    def collect(line: str) -> str:
        for target in LINK.findall(line):
            if not _skipped(target):
                path = target.partition("#")[0]
                found.append((target, Path(os.path.normpath(real.parent / path))))
        return line

    for _ in _outside_fences(markdown, collect):
        pass
    yield from found


def _outside_fences(markdown: str, change: Any) -> Iterator[str]:
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        yield line if fenced else change(line)


def _skipped(target: str) -> bool:
    return target.startswith(("#", "/")) or bool(SCHEME.match(target))


def _in_repository(path: Path, root: Path, docs: Path) -> bool:
    return (
        path.is_relative_to(root)
        and not path.is_relative_to(docs)
        and path.exists()
        and ".git" not in path.relative_to(root).parts
    )


def _add(files: Files, file: File) -> None:
    if files.get_file_from_path(file.src_uri) is None:
        files.append(file)


def _tracked(root: Path, folder: str) -> list[str]:
    """The files git tracks in a folder: it may also hold ignored secrets (deploy/kubernetes)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", folder],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        log.info("not a git checkout: the site's copy of %s/ stays empty", folder)
        return []
    return [name for name in listed.decode().split("\0") if name]
