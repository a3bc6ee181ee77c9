"""resolve-zones checks its inputs before Spark starts, draws its progress bar only on a
terminal, and its chart keeps redirects apart from owned answers, in percent, with totals."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import pytest

from pulsar_lookup_gateway.zones.chart import AXIS_LABEL, share_data, share_figure
from pulsar_lookup_gateway.zones.cli import show_progress
from pulsar_lookup_gateway.zones.inputs import check_outputs, check_topics
from pulsar_lookup_gateway.zones.pairs import (
    CONNECT,
    FAILED,
    REDIRECT,
    SummaryRow,
    Zone,
    ZonesError,
)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("name", "content", "fmt", "message"),
    [
        ("missing.csv", None, "csv", "does not exist"),
        ("t.csv", "name\na\n", "csv", "no 'topic' column (columns: name)"),
        ("t.txt", "\n  \n", "text", "no topics"),
        ("empty-dir", "", "csv", "is a directory without data files"),
    ],
)
def test_bad_topics_are_one_line(
    tmp_path: Path, name: str, content: str | None, fmt: str, message: str
) -> None:
    path = tmp_path / name
    if name.endswith("dir"):
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ZonesError, match=re.escape(message)) as caught:
        check_topics(str(path), fmt)
    assert "\n" not in str(caught.value)


def test_good_topics_pass_plain_compressed_and_as_a_directory(tmp_path: Path) -> None:
    check_topics(write(tmp_path / "t.csv", "topic\npersistent://public/default/a\n"), "csv")
    check_topics("file:" + write(tmp_path / "t.txt", "a\nb\n"), "text")
    with gzip.open(tmp_path / "t.csv.gz", "wt") as handle:
        handle.write("topic,x\na,1\n")
    check_topics(str(tmp_path / "t.csv.gz"), "csv")
    parts = tmp_path / "parts"
    parts.mkdir()
    write(parts / "_SUCCESS", "")
    write(parts / "part-0.csv", "topic\na\n")
    check_topics(str(parts), "csv")
    check_topics("hdfs://namenode/topics", "csv")  # not local: Spark's to check


def test_outputs_refuse_to_overwrite_foreign_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    check_outputs(out, str(out / "answers"))  # new: fine
    (out / "answers").mkdir(parents=True)
    (out / "answers" / "zone=dc").mkdir()
    check_outputs(out, str(out / "answers"))  # an earlier run's answers: fine
    write(out / "answers" / "precious.txt", "keep me")
    with pytest.raises(ZonesError, match=r"--out: .* holds other files .*precious\.txt"):
        check_outputs(out, str(out / "answers"))
    (out / "share.png").mkdir()
    with pytest.raises(ZonesError, match=r"share\.png is a directory"):
        check_outputs(out, str(tmp_path / "elsewhere"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ZonesError, match="exists and is not a directory"):
        check_outputs(blocker, str(tmp_path / "a"))


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_only_on_a_terminal() -> None:
    assert show_progress(_Stream(True), {"TERM": "xterm"})
    assert not show_progress(_Stream(True), {"TERM": "dumb"})
    assert not show_progress(_Stream(False), {"TERM": "xterm"})
    assert not show_progress(None, {})
    closed = io.StringIO()  # a real closed stream raises ValueError from isatty()
    closed.close()
    assert not show_progress(closed, {"TERM": "xterm"})


ZONES = [Zone("dc", "internal"), Zone("edge", "external", tls=True)]
ROWS = [
    SummaryRow("dc", "internal", "b1:8080", 60, 45, 15, 0, 0.6),
    SummaryRow("dc", "internal", "b2:8080", 30, 30, 0, 0, 0.3),
    SummaryRow("dc", "internal", "failed:TopicNotFound", 10, 0, 0, 0, 0.1),
    SummaryRow("edge", "external", "b1:8080", 50, 0, 50, 0, 1.0),
]


def test_chart_keeps_redirects_apart_and_sums_to_100_percent() -> None:
    data = share_data(ROWS, ZONES)
    assert (data.connect, data.redirect, data.failed) == (75, 65, 10)
    assert data.answers == sum(row.topics for row in ROWS)
    for zone in ("dc", "edge"):
        total = sum(s.percent for s in data.segments if s.zone == zone)
        assert total == pytest.approx(100.0)
    b1_dc = {
        s.response: s.percent for s in data.segments if (s.zone, s.broker) == ("dc", "b1:8080")
    }
    assert b1_dc == {CONNECT: pytest.approx(45.0), REDIRECT: pytest.approx(15.0)}
    assert [s.response for s in data.segments if s.broker.startswith("failed:")] == [FAILED]
    assert "n = 150 (75 connect, 65 redirect, 10 failed)" in data.title()


def test_chart_axis_is_in_percent_with_totals_in_the_labels() -> None:
    figure = share_figure(ROWS, ZONES)
    axes = figure.axes[0]
    assert axes.get_xlabel() == AXIS_LABEL and "%" in AXIS_LABEL
    assert axes.get_xlim() == (0.0, 100.0)
    assert axes.xaxis.get_major_formatter()(50, 0) == "50%"
    ticks = [label.get_text() for label in axes.get_yticklabels()]
    assert ticks[0].endswith("n = 100") and ticks[1].endswith("n = 50")
    legend_box = axes.get_legend()
    assert legend_box is not None
    legend = [text.get_text() for text in legend_box.get_texts()]
    assert "connect: owner (n = 75)" in legend and "redirect: no owner (n = 65)" in legend
