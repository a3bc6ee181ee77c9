"""A PNG of each zone's topic share per broker (matplotlib, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from zones.pairs import FAILED_PREFIX, SummaryRow, Zone


def plot_share(rows: Sequence[SummaryRow], zones: Sequence[Zone], path: Path) -> None:
    """A PNG: one horizontal bar per zone, split into each broker's share of its topics;
    failed answers in grey (hatched). Matplotlib's object API with the Agg canvas: no pyplot
    state, no display needed."""
    brokers = sorted({r.broker for r in rows if not r.broker.startswith(FAILED_PREFIX)})
    failures = sorted({r.broker for r in rows if r.broker.startswith(FAILED_PREFIX)})
    palette = [
        "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6",
    ]  # fmt: skip
    greys = ["#9e9e9e", "#bdbdbd", "#757575", "#d6d6d6", "#616161"]
    colours = {b: palette[i % len(palette)] for i, b in enumerate(brokers)}
    colours.update({f: greys[i % len(greys)] for i, f in enumerate(failures)})

    figure = Figure(figsize=(11, 1.6 + 0.7 * len(zones)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    labels = [f"{zone.name}\n({zone.listener}{', tls' if zone.tls else ''})" for zone in zones]
    drawn: set[str] = set()
    for y, zone in enumerate(zones):
        left = 0.0
        for row in (r for r in rows if r.zone == zone.name):
            failed = row.broker.startswith(FAILED_PREFIX)
            axes.barh(
                y,
                row.share,
                left=left,
                color=colours[row.broker],
                edgecolor="white",
                hatch="//" if failed else None,
                label=row.broker if row.broker not in drawn else None,
            )
            drawn.add(row.broker)
            if row.share >= 0.06:
                axes.text(
                    left + row.share / 2,
                    y,
                    f"{100 * row.share:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                )
            left += row.share
    axes.set_yticks(range(len(zones)), labels)
    axes.invert_yaxis()
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of the zone's topics")
    axes.set_title("Topic share per broker, per zone")
    if drawn:
        axes.legend(
            loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, ncols=1 + len(drawn) // 25
        )
    else:
        axes.text(0.5, 0.5, "no topics", ha="center", va="center", transform=axes.transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=100)
