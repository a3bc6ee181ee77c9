"""A PNG of each zone's answers per broker (matplotlib, no display needed): connect answers
(the bundle's owner) and redirects (a bundle nobody owns) as separate series, in percent of the
zone's answers, with the counts behind them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import PercentFormatter

from pulsar_lookup_gateway.zones.pairs import (
    CONNECT,
    FAILED,
    FAILED_PREFIX,
    REDIRECT,
    SummaryRow,
    Zone,
)

PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6",
)  # fmt: skip
GREYS = ("#9e9e9e", "#bdbdbd", "#757575", "#d6d6d6", "#616161")
#: How each response is drawn: connect solid, redirect dotted on a lighter tint, failed hatched.
HATCH = {CONNECT: None, REDIRECT: "..", FAILED: "//"}
AXIS_LABEL = "share of the zone's answers (%)"


@dataclass(frozen=True, slots=True)
class Segment:
    """One piece of a zone's bar: a broker's connect or redirect answers, or one failure."""

    zone: str
    broker: str  # a broker id, or failed:<ServerError name>
    response: str  # connect | redirect | failed
    answers: int
    percent: float  # of the zone's answers


@dataclass(frozen=True, slots=True)
class ShareData:
    """What the chart draws, and the totals it prints."""

    segments: tuple[Segment, ...]
    zone_answers: dict[str, int]  # zone name -> answers (a zone without answers: 0)
    connect: int
    redirect: int
    failed: int

    @property
    def answers(self) -> int:
        return self.connect + self.redirect + self.failed

    def broker_answers(self, broker: str) -> int:
        return sum(s.answers for s in self.segments if s.broker == broker)

    def title(self) -> str:
        return (
            f"Answers per broker, per zone: n = {self.answers:,} "
            f"({self.connect:,} connect, {self.redirect:,} redirect, {self.failed:,} failed)"
        )


def share_data(rows: Sequence[SummaryRow], zones: Sequence[Zone]) -> ShareData:
    """The segments of every zone's bar, in the summary's order (brokers by answers, failures
    last; a broker's connect answers, then its redirects)."""
    segments: list[Segment] = []
    zone_answers = {zone.name: 0 for zone in zones}
    for row in rows:
        zone_answers[row.zone] = zone_answers.get(row.zone, 0) + row.topics
    for row in rows:
        total = zone_answers[row.zone]
        if row.broker.startswith(FAILED_PREFIX):
            parts = [(FAILED, row.topics)]
        else:
            parts = [(CONNECT, row.connect), (REDIRECT, row.redirect)]
        segments += [
            Segment(row.zone, row.broker, response, count, 100.0 * count / total)
            for response, count in parts
            if count > 0
        ]
    return ShareData(
        tuple(segments),
        zone_answers,
        sum(s.answers for s in segments if s.response == CONNECT),
        sum(s.answers for s in segments if s.response == REDIRECT),
        sum(s.answers for s in segments if s.response == FAILED),
    )


def _tint(colour: str, amount: float = 0.55) -> tuple[float, float, float]:
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def share_figure(rows: Sequence[SummaryRow], zones: Sequence[Zone]) -> Figure:
    """One horizontal bar per zone, 0-100 % of its answers: each broker's connect answers in
    its colour, its redirects in a lighter tint, dotted; failures grey, hatched. Matplotlib's
    object API with the Agg canvas: no pyplot state, no display needed."""
    data = share_data(rows, zones)
    brokers = list(dict.fromkeys(s.broker for s in data.segments if s.response != FAILED))
    failures = list(dict.fromkeys(s.broker for s in data.segments if s.response == FAILED))
    colours = {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(sorted(brokers))}
    colours.update({f: GREYS[i % len(GREYS)] for i, f in enumerate(sorted(failures))})

    figure = Figure(figsize=(11, 1.8 + 0.8 * len(zones)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for y, zone in enumerate(zones):
        left = 0.0
        for segment in (s for s in data.segments if s.zone == zone.name):
            colour = colours[segment.broker]
            redirect = segment.response == REDIRECT
            axes.barh(
                y,
                segment.percent,
                left=left,
                color=_tint(colour) if redirect else colour,
                edgecolor=colour if redirect else "white",
                linewidth=0 if redirect else 0.8,
                hatch=HATCH[segment.response],
            )
            if segment.percent >= 6:
                axes.text(
                    left + segment.percent / 2,
                    y,
                    f"{segment.percent:.0f}%",
                    ha="center",
                    va="center",
                    fontsize=8,
                )
            left += segment.percent
    labels = [
        f"{zone.name}\n({zone.listener}{', tls' if zone.tls else ''})\n"
        f"n = {data.zone_answers[zone.name]:,}"
        for zone in zones
    ]
    axes.set_yticks(range(len(zones)), labels)
    axes.invert_yaxis()
    axes.set_xlim(0, 100)
    axes.xaxis.set_major_formatter(PercentFormatter(xmax=100, decimals=0))
    axes.set_xlabel(AXIS_LABEL)
    axes.set_title(data.title(), fontsize=10)
    handles = [
        Patch(
            facecolor="#808080", edgecolor="white", label=f"connect: owner (n = {data.connect:,})"
        ),
        Patch(
            facecolor=_tint("#808080"),
            edgecolor="#808080",
            linewidth=0,
            hatch=HATCH[REDIRECT],
            label=f"redirect: no owner (n = {data.redirect:,})",
        ),
        *(
            Patch(facecolor=colours[b], label=f"{b} (n = {data.broker_answers(b):,})")
            for b in brokers
        ),
        *(
            Patch(
                facecolor=colours[f],
                edgecolor="white",
                hatch=HATCH[FAILED],
                label=f"{f} (n = {data.broker_answers(f):,})",
            )
            for f in failures
        ),
    ]
    axes.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        fontsize=8,
        ncols=1 + len(handles) // 25,
    )
    if not data.segments:
        axes.text(0.5, 0.5, "no topics", ha="center", va="center", transform=axes.transAxes)
    return figure


def plot_share(rows: Sequence[SummaryRow], zones: Sequence[Zone], path: Path) -> None:
    """share_figure() as a PNG at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    share_figure(rows, zones).savefig(path, format="png", dpi=100)
