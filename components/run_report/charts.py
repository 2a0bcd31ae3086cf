"""The run's charts, drawn once with matplotlib: inline SVG for the HTML report (no script, font
or file to load) and the PNG pictures the console summary names.

Each chart is a function that draws on a matplotlib axis; `svg` and `png_grid` put it on a page.
"""
from __future__ import annotations

import io
import math
import re
from html import escape
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import matplotlib
from matplotlib.figure import Figure

from components.run_report.facts import FeatureSplit, RunFacts

# Colour-blind-safe palette (Okabe-Ito).
COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"]
# Text stays text (searchable, small); a fixed salt keeps ids, and so each report, reproducible:
# an id is a hash of what it names, so equal ids in two charts of one page name equal things.
SETTINGS = {"svg.fonttype": "none", "svg.hashsalt": "run-report", "font.size": 8}
Draw = Callable[[object], None]  # draws on a matplotlib Axes


def common_edges(histograms: List[List[tuple]], bins: int = 10) -> List[float]:
    """Equal-width bins over every split's range, so that the splits' bars line up."""
    lows = [b[0] for h in histograms for b in h]
    highs = [b[1] for h in histograms for b in h]
    if not lows:
        return [0.0, 1.0]
    low, high = min(lows), max(highs)
    width = (high - low) / bins or 1.0
    return [low + i * width for i in range(bins + 1)]


def rebin(buckets: List[tuple], edges: List[float]) -> List[float]:
    """A TFDV histogram's counts moved to other bin edges (uniform within each bucket), as
    shares of the split's examples."""
    counts = [0.0] * (len(edges) - 1)
    for low, high, count in buckets:
        for i in range(len(counts)):
            if high <= low:  # a bucket of one value
                inside = 1.0 if edges[i] <= low <= edges[i + 1] else 0.0
            else:
                inside = max(0.0, min(high, edges[i + 1]) - max(low, edges[i])) / (high - low)
            counts[i] += count * inside
            if high <= low and inside:
                break
    total = sum(counts) or 1.0
    return [c / total for c in counts]


def _x_labels(axis, labels: Sequence[str], at_most: int, keep) -> None:
    step = max(1, math.ceil(len(labels) / at_most))
    ticks = list(range(0, len(labels), step))
    axis.set_xticks(ticks, [keep(labels[i]) for i in ticks], fontsize=7)


def bars(labels: Sequence[str], series: Dict[str, Sequence[float]]) -> Draw:
    """Grouped bars: one group per label, one bar per series (NaN: no bar)."""
    def draw(axis):
        width = 0.8 / max(len(series), 1)
        for index, (name, values) in enumerate(series.items()):
            axis.bar([i - 0.4 + width * (index + 0.5) for i in range(len(labels))],
                     [0.0 if math.isnan(v) else v for v in values], width, label=name)
        _x_labels(axis, labels, 8, lambda label: label[:12])
        axis.legend(fontsize=7)
    return draw


def lines(labels: Sequence[str], series: Dict[str, Sequence[float]]) -> Draw:
    """One line per series over the labels (epochs, runs), each point marked."""
    def draw(axis):
        for name, values in series.items():
            points = [(i, v) for i, v in enumerate(values) if not math.isnan(v)]
            axis.plot([i for i, _ in points], [v for _, v in points], marker="o",
                      markersize=3, label=name)
        _x_labels(axis, labels, 6, lambda label: label[-15:])
        axis.legend(fontsize=7)
    return draw


def feature(per_split: Dict[str, FeatureSplit]) -> Tuple[str, Draw]:
    """A feature's share of examples per value range (numeric) or value, one series per split:
    (what it shows, the chart)."""
    first = next(iter(per_split.values()))
    if first.kind == "numeric":
        edges = common_edges([entry.buckets for entry in per_split.values()])
        return ("share of examples per value range, by split",
                bars([f"{low:.4g}" for low in edges[:-1]],
                     {split: rebin(entry.buckets, edges) for split, entry in per_split.items()}))
    values = sorted({v for entry in per_split.values() for v, _ in entry.buckets})
    series = {}
    for split, entry in per_split.items():
        counts = dict(entry.buckets)
        total = sum(counts.values()) or 1
        series[split] = [counts.get(v, 0) / total for v in values]
    return "share of examples per value, by split", bars(values, series)


def evaluation(facts: RunFacts) -> Tuple[str, Draw]:
    """The key metric per slice, the candidate beside the model that served (when one did)."""
    slices = sorted(facts.by_slice, key=lambda s: (s != "all", s))
    values = {s: facts.by_slice[s].get(facts.key_metric, {}) for s in slices}
    series = {"candidate": [values[s].get("candidate", math.nan) for s in slices]}
    if facts.baseline_version:
        series[f"baseline (serving v{facts.baseline_version})"] = [
            values[s].get("baseline", math.nan) for s in slices]
    return f"{facts.key_metric} on the eval split, by slice", bars(slices, series)


def _page(width: float, height: float, rows: int = 1, columns: int = 1, heading: float = 0.0):
    """A figure of rows x columns charts, margins in inches (heading: room for a title above
    all). Fixed margins: a layout engine draws every chart twice (half its time, measured)."""
    figure = Figure(figsize=(width, height))
    left, right, bottom, top, gap_w, gap_h = 0.55, 0.15, 0.45, 0.3 + heading, 0.6, 0.75
    axes_w = (width - left - right - gap_w * (columns - 1)) / columns
    axes_h = (height - bottom - top - gap_h * (rows - 1)) / rows
    figure.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height,
                           top=1 - top / height, wspace=gap_w / axes_w, hspace=gap_h / axes_h)
    axes = figure.subplots(rows, columns, squeeze=False)
    for axis in axes.flat:
        axis.set_prop_cycle(color=COLOURS)
    return figure, list(axes.flat)


def svg(title: str, draw: Draw, width: float = 3.4, height: float = 1.9) -> str:
    """One chart as an inline <svg> element (inches: 72 pt each), titled for a screen reader
    (its <title>) and above the chart."""
    text = io.StringIO()
    with matplotlib.rc_context(SETTINGS):
        figure, [axis] = _page(width, height)
        draw(axis)
        axis.set_title(title, fontsize=7)
        figure.savefig(text, format="svg")
    element = text.getvalue()
    element = re.sub(r"<metadata>.*?</metadata>", "", element[element.index("<svg"):],
                     flags=re.DOTALL)
    opening = element.index(">") + 1
    return (element[:opening].replace("<svg ", '<svg role="img" ', 1)
            + f"<title>{escape(title)}</title>" + element[opening:])


def png_grid(path: Path, title: str, panels: List[Tuple[str, Draw]], columns: int = 3,
             panel: Tuple[float, float] = (4, 3)) -> Path:
    """Charts side by side in one PNG file, each under its title (panel: inches each)."""
    rows = max(1, math.ceil(len(panels) / columns))
    columns = min(columns, max(len(panels), 1))
    with matplotlib.rc_context(SETTINGS):
        figure, axes = _page(panel[0] * columns, panel[1] * rows, rows, columns, heading=0.35)
        for axis, (panel_title, draw) in zip(axes, panels, strict=False):
            draw(axis)
            axis.set_title(panel_title, fontsize=9)
        for axis in axes[len(panels):]:
            axis.axis("off")
        figure.suptitle(title, fontsize=11)
        figure.savefig(path, dpi=80)
    return path


def pictures(facts: RunFacts, folder: Path) -> List[Path]:
    """The console summary's pictures: the data's distributions by split (data.png) and the key
    metric by slice (evaluation.png), each when the run got that far."""
    folder.mkdir(parents=True, exist_ok=True)
    found = []
    if facts.features:
        panels = []
        for name, per_split in sorted(facts.features.items()):
            missing = ", ".join(f"{split} {entry.missing}" for split, entry in per_split.items())
            panels.append((f"{name} (missing: {missing})", feature(per_split)[1]))
        found.append(png_grid(folder / "data.png", "Data distributions by split (share of "
                                                   "examples)", panels))
    if facts.by_slice:
        chart_title, draw = evaluation(facts)
        found.append(png_grid(folder / "evaluation.png", chart_title, [("", draw)], columns=1,
                              panel=(max(6, 1.2 * len(facts.by_slice)), 4)))
    return found
