"""Server-rendered SVG charts for the dashboard: pure geometry, no queries, no JavaScript.

Functions here turn numbers into coordinates; ``templates/admin/ojs/dashboard.html`` draws
them as ``<polyline>`` and ``<rect>`` elements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: Plot area margins in SVG units: room for the axis labels.
LEFT, RIGHT, TOP, BOTTOM = 44, 28, 10, 24


def nice_ceiling(value: float) -> int:
    """The smallest of 1, 2, 5 times a power of ten at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude >= value:
                return step * magnitude
        magnitude *= 10


@dataclass
class Line:
    name: str
    points: str  # "x,y x,y …" for <polyline points=…>
    total: int


@dataclass
class LineChart:
    width: int
    height: int
    lines: list[Line]
    y_ticks: list[tuple[float, int]]  # (y, value)
    x_ticks: list[tuple[float, str]]  # (x, label)
    left: int = LEFT
    right: float = 0.0
    top: int = TOP
    bottom: float = 0.0


def line_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[int]],
    *,
    width: int = 720,
    height: int = 200,
    label_every: int = 10,
) -> LineChart:
    """One polyline per series over ``labels`` (one slot per label, left to right)."""
    slots = max(len(labels), 2)
    plot_w = width - LEFT - RIGHT
    plot_h = height - TOP - BOTTOM
    peak = max((max(v, default=0) for v in series.values()), default=0)
    # Whole-number gridlines: a 1-2-5 step giving at most four intervals, and a top on it.
    step = nice_ceiling(peak / 4)
    top_value = max(step * -(-peak // step), step)

    def x(i: int) -> float:
        return round(LEFT + plot_w * i / (slots - 1), 1)

    def y(v: float) -> float:
        return round(TOP + plot_h - plot_h * v / top_value, 1)

    lines = [
        Line(name, " ".join(f"{x(i)},{y(v)}" for i, v in enumerate(values)), sum(values))
        for name, values in series.items()
    ]
    y_ticks = [(y(v), v) for v in range(0, top_value + 1, step)]
    x_ticks = [(x(i), labels[i]) for i in range(0, len(labels), label_every)]
    if labels and (len(labels) - 1) % label_every:
        x_ticks.append((x(len(labels) - 1), labels[-1]))
    return LineChart(width, height, lines, y_ticks, x_ticks, right=LEFT + plot_w,
                     bottom=TOP + plot_h)  # fmt: skip


@dataclass
class Segment:
    name: str
    x: float
    width: float
    value: int


@dataclass
class Bar:
    label: str
    y: float
    segments: list[Segment] = field(default_factory=list)
    total: int = 0
    end_x: float = 0.0  # where the bar ends: its total is written just after
    middle_y: float = 0.0  # the vertical centre, for the labels


@dataclass
class BarChart:
    width: int
    height: int
    bars: list[Bar]
    bar_height: int
    label_width: int
    top_value: int


def bar_chart(
    rows: Sequence[tuple[str, dict[str, int]]],
    *,
    width: int = 720,
    bar_height: int = 18,
    gap: int = 8,
    label_width: int = 140,
) -> BarChart:
    """Horizontal stacked bars, one per ``(label, {series: value})`` row."""
    plot_w = width - label_width - 60
    top_value = nice_ceiling(max((sum(v.values()) for _, v in rows), default=0))
    bars = []
    for i, (label, values) in enumerate(rows):
        bar = Bar(label, TOP + i * (bar_height + gap))
        offset = float(label_width)
        for name, value in values.items():
            w = round(plot_w * value / top_value, 1)
            bar.segments.append(Segment(name, round(offset, 1), w, value))
            offset += w
        bar.total = sum(values.values())
        bar.end_x = round(offset, 1)
        bar.middle_y = bar.y + bar_height / 2
        bars.append(bar)
    height = TOP + max(len(rows), 1) * (bar_height + gap) + 4
    return BarChart(width, height, bars, bar_height, label_width, top_value)


#: Percentiles drawn by :func:`percentile_chart`, widest (drawn first, lightest) first.
PERCENTILES = ("p99", "p95", "p50")


def percentile_chart(
    rows: Sequence[tuple[str, Mapping[str, float]]],
    *,
    width: int = 720,
    bar_height: int = 18,
    gap: int = 8,
    label_width: int = 140,
) -> BarChart:
    """One bar per ``(label, {"p50": v, "p95": v, "p99": v})`` row, the three overlaid.

    Each segment starts at the axis (``x = label_width``) and is as long as its value, so
    the p50 bar sits on top of the p95 bar, which sits on top of the p99 bar. Values are
    in milliseconds; the bar's end label is the p99.
    """
    plot_w = width - label_width - 80
    top_value = nice_ceiling(max((v.get("p99", 0) for _, v in rows), default=0))
    bars = []
    for i, (label, values) in enumerate(rows):
        bar = Bar(label, TOP + i * (bar_height + gap))
        for name in PERCENTILES:
            value = values.get(name, 0)
            w = round(plot_w * value / top_value, 1)
            bar.segments.append(Segment(name, float(label_width), w, round(value)))
        bar.total = round(values.get("p99", 0))
        bar.end_x = round(label_width + plot_w * values.get("p99", 0) / top_value, 1)
        bar.middle_y = bar.y + bar_height / 2
        bars.append(bar)
    height = TOP + max(len(rows), 1) * (bar_height + gap) + 4
    return BarChart(width, height, bars, bar_height, label_width, top_value)
