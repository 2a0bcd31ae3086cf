"""Small inline SVG charts (bars and lines) for the run report: no scripts, fonts or files.

An SVG inside the HTML cannot fail to load, and a screen reader gets its <title>.
"""
from __future__ import annotations

import math
from html import escape
from typing import Dict, List, Sequence

# Colour-blind-safe palette (Okabe-Ito).
COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"]


def _legend(series: Sequence[str], x: float, y: float) -> List[str]:
    parts = []
    for index, name in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        parts.append(f'<rect x="{x + index * 110}" y="{y - 8}" width="10" height="10" '
                     f'fill="{colour}"/><text x="{x + index * 110 + 14}" y="{y + 1}" '
                     f'font-size="10">{escape(name)}</text>')
    return parts


def _frame(title: str, width: int, height: int, body: List[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif">'
            f'<title>{escape(title)}</title>' + "".join(body) + "</svg>")


def bars(title: str, labels: Sequence[str], series: Dict[str, Sequence[float]],
         width: int = 320, height: int = 160, value_format: str = "{:.2f}") -> str:
    """Grouped bars: one group per label, one bar per series (NaN: no bar)."""
    left, bottom, top = 34, 34, 18
    plot_w, plot_h = width - left - 6, height - bottom - top
    values = [v for vs in series.values() for v in vs if not math.isnan(v)]
    peak = max(values, default=0) or 1.0
    group_w = plot_w / max(len(labels), 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 6}" y2="{top + plot_h}" '
            'stroke="#444"/>',
            f'<text x="{left - 4}" y="{top + 4}" font-size="9" text-anchor="end">'
            f'{escape(value_format.format(peak))}</text>',
            f'<text x="{left - 4}" y="{top + plot_h}" font-size="9" text-anchor="end">0</text>']
    for s_index, (name, vs) in enumerate(series.items()):
        colour = COLOURS[s_index % len(COLOURS)]
        for l_index, value in enumerate(vs):
            if math.isnan(value):
                continue
            h = plot_h * max(value, 0) / peak
            x = left + l_index * group_w + group_w * 0.1 + s_index * bar_w
            body.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" '
                        f'height="{h:.1f}" fill="{colour}"><title>{escape(name)} '
                        f'{escape(labels[l_index])}: {escape(value_format.format(value))}'
                        '</title></rect>')
    step = max(1, math.ceil(len(labels) / 8))  # at most 8 axis labels
    for l_index in range(0, len(labels), step):
        x = left + (l_index + 0.5) * group_w
        body.append(f'<text x="{x:.1f}" y="{top + plot_h + 12}" font-size="9" '
                    f'text-anchor="middle">{escape(labels[l_index][:12])}</text>')
    body += _legend(list(series), left, height - 6)
    return _frame(title, width, height, body)


def lines(title: str, labels: Sequence[str], series: Dict[str, Sequence[float]],
          width: int = 480, height: int = 200) -> str:
    """One line per series over the labels (epochs, runs), each point marked."""
    left, bottom, top = 46, 40, 18
    plot_w, plot_h = width - left - 10, height - bottom - top
    values = [v for vs in series.values() for v in vs if not math.isnan(v)]
    low, high = min(values, default=0.0), max(values, default=1.0)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    span = max(len(labels) - 1, 1)

    def xy(index: int, value: float) -> str:
        return (f"{left + plot_w * index / span:.1f},"
                f"{top + plot_h * (high - value) / (high - low):.1f}")

    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" '
            'stroke="#444"/>',
            f'<text x="{left - 4}" y="{top + 4}" font-size="9" text-anchor="end">{high:.3g}'
            '</text>',
            f'<text x="{left - 4}" y="{top + plot_h}" font-size="9" text-anchor="end">'
            f'{low:.3g}</text>']
    for s_index, (name, vs) in enumerate(series.items()):
        colour = COLOURS[s_index % len(COLOURS)]
        points = [(i, v) for i, v in enumerate(vs) if not math.isnan(v)]
        if len(points) > 1:
            body.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                        + " ".join(xy(i, v) for i, v in points) + '"/>')
        for i, v in points:
            x, y = xy(i, v).split(",")
            body.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{colour}"><title>'
                        f'{escape(name)} {escape(labels[i])}: {v:.4g}</title></circle>')
    step = max(1, math.ceil(len(labels) / 6))
    for index in range(0, len(labels), step):
        x = left + plot_w * index / span
        body.append(f'<text x="{x:.1f}" y="{top + plot_h + 12}" font-size="9" '
                    f'text-anchor="middle">{escape(labels[index][-15:])}</text>')
    body += _legend(list(series), left, height - 6)
    return _frame(title, width, height, body)
