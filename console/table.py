"""Aligned text tables for terminals."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def format_table(
    rows: Sequence[Sequence[str]], *, right: Collection[int] = (), indent: str = ""
) -> list[str]:
    """One line per row: every column padded to its widest cell, two spaces apart, the columns
    whose index is in `right` aligned right; no trailing blanks."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (
            indent
            + "  ".join(
                cell.rjust(width) if i in right else cell.ljust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            )
        ).rstrip()
        for row in rows
    ]
