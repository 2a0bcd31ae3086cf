"""Small generated datasets with a learnable signal, for the binary and regression tasks: seeded
numpy, no network, independent of the bundled example. A few numeric columns, one categorical,
some missing cells; the generating functions are here so that tests can check predictions
against them."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

COLORS = ("red", "green", "blue")
SIZES = ("small", "medium", "large")
SIZE_EFFECT = {"small": -8.0, "medium": 0.0, "large": 12.0}


def churn_logit(x1: float, x2: float, color: str) -> float:
    """The binary dataset's log-odds of 'yes'."""
    return 2.5 * x1 - 1.5 * x2 + (1.5 if color == "red" else 0.0) - 0.5


def price(x1: float, x2: float, size: str) -> float:
    """The regression dataset's label, before noise (noise std 2)."""
    return 50.0 + 10.0 * x1 - 6.0 * x2 + SIZE_EFFECT[size]


def _cell(value, missing: bool) -> str:
    return "NA" if missing else (f"{value:.4f}" if isinstance(value, float) else value)


def binary_csv(path: Path, rows: int = 240, seed: int = 11) -> Path:
    """Columns x1, x2 (numeric), color (categorical), churned ('yes' / 'no')."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["x1", "x2", "color", "churned"])
        for _ in range(rows):
            x1, x2 = float(rng.normal()), float(rng.normal())
            color = str(rng.choice(COLORS))
            p = 1.0 / (1.0 + np.exp(-churn_logit(x1, x2, color)))
            out.writerow([_cell(x1, False), _cell(x2, rng.random() < 0.05),
                          _cell(color, rng.random() < 0.03),
                          "yes" if rng.random() < p else "no"])
    return path


def regression_csv(path: Path, rows: int = 300, seed: int = 12) -> Path:
    """Columns x1, x2 (numeric), size (categorical), price (a number)."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["x1", "x2", "size", "price"])
        for _ in range(rows):
            x1, x2 = float(rng.normal()), float(rng.normal())
            size = str(rng.choice(SIZES))
            label = price(x1, x2, size) + float(rng.normal(0.0, 2.0))
            out.writerow([_cell(x1, False), _cell(x2, rng.random() < 0.05),
                          _cell(size, rng.random() < 0.03), f"{label:.2f}"])
    return path
