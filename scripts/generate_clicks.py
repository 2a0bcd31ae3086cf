"""A seeded, synthetic click log with a planted structure, for the two-tower recommender example.

    python scripts/generate_clicks.py --out data/clicks --spans 3 --rows 30000 --items 400 \
        --users 3000 --seed 7

writes data/clicks/span-20240101/clicks.csv, span-20240102/..., one dated span per day, and
data/clicks/generation.json (what the last line printed: the row counts and the AUCs below).
`--style unseen` writes one file, OUT/purchases.csv, with other column names, other id prefixes
and other channel values but the same planted structure: a log this repository has never seen.
numpy only; the output is the same bytes for the same arguments.

The planted structure (the world is drawn once per seed, every span's rows from it):
- GENRES latent genres, random unit directions in DIM coordinates; each item has a genre, a
  latent vector v (ITEM_GENRE of its genre's direction plus its own Gaussian part, |v| ~ 1) and a
  popularity bias p ~ N(0, 1); each user a genre, a latent taste t (TASTE * (USER_GENRE of their
  genre's direction plus their own Gaussian part)) and a history length: most users have
  clicked at least 10 items; new users (NEW_USERS of them) only 0-9, some none;
- a row's history, `user_click_history` (oldest first): HISTORY items drawn without replacement
  by affinity, softmax(t.v / TEMPERATURE) over the items, so the history reveals the taste; the
  rows of LONG_ROWS log LONG items (more than the model keeps: a truncation test);
- its candidate, `item_id`: a popular item (drawn with weight exp(EXPOSURE * p)) with probability
  POPULAR_SHARE, else one drawn uniformly;
- `clicked` ~ Bernoulli(sigmoid(A * t.v + B * p + C)); `hour` and `device` are drawn
  independently (they carry no signal); `user_id` names the user (the model ignores it).

Three scorers on the last span (the eval-like data; with one file, each half scored by what the
other half taught), AUCs from ranks (ties averaged):
- achievable: the true click probabilities, the best any model can do;
- popularity: the item's empirical click rate on the other spans (popularity_true_bias: the
  planted bias itself), what an item-only model can do;
- history: logistic regression, fitted on the other spans, on the mean of the history's true item
  vectors dotted with the candidate's, and the candidate's bias: what a two-tower model can
  approach from these columns.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np

DIM = 12             # latent coordinates
GENRES = 8           # latent genres: random unit directions
ITEM_GENRE = 0.8     # an item's vector: this much of its genre's direction, the rest its own
USER_GENRE = 0.95    # a user's taste: this much of a genre's direction, the rest their own
TASTE = 2.8          # a taste's length
TEMPERATURE = 0.3    # of the softmax that draws a history
HISTORY = 10
LONG = 12
NEW_USERS = 0.15     # share of users with fewer than HISTORY clicks (0-9, uniformly)
LONG_ROWS = 0.03     # share of the other users' rows that log LONG items
POPULAR_SHARE = 0.5  # share of candidates drawn by exposure, the others uniformly
EXPOSURE = 1.0
A, B, C = 1.4, 0.5, -1.9
DEVICES = ("mobile", "desktop", "tablet")
DEVICE_SHARES = (0.55, 0.35, 0.10)

# Column names, id formats and device values per style.
STYLES = {
    "standard": {"columns": ("user_id", "item_id", "user_click_history", "hour", "device",
                             "clicked"),
                 "user": "u{:05d}", "item": "sku{}", "item_base": 1000, "devices": DEVICES,
                 "file": "clicks.csv"},
    "unseen": {"columns": ("visitor", "product", "recent_products", "hour_of_day", "channel",
                           "bought"),
               "user": "vis-{:06d}", "item": "P{}", "item_base": 70000,
               "devices": ("app", "web", "kiosk"), "file": "purchases.csv"},
}


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The area under the ROC curve: the Mann-Whitney statistic from ranks, ties averaged."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels).astype(bool)
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    average_rank = ends - (counts - 1) / 2.0      # 1-based rank of each distinct score
    ranks = average_rank[inverse]
    positives, negatives = labels.sum(), (~labels).sum()
    if positives == 0 or negatives == 0:
        return float("nan")
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0)
                 / (positives * negatives))


def make_world(seed: int, items: int, users: int) -> dict:
    rng = np.random.default_rng([seed, 0])
    centers = rng.normal(size=(GENRES, DIM))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    item_genre = rng.integers(0, GENRES, size=items)
    vectors = (ITEM_GENRE * centers[item_genre] + np.sqrt(1 - ITEM_GENRE ** 2)
               * rng.normal(0.0, 1.0 / np.sqrt(DIM), size=(items, DIM)))
    bias = rng.normal(0.0, 1.0, size=items)
    user_genre = rng.integers(0, GENRES, size=users)
    taste = TASTE * (USER_GENRE * centers[user_genre] + np.sqrt(1 - USER_GENRE ** 2)
                     * rng.normal(0.0, 1.0 / np.sqrt(DIM), size=(users, DIM)))
    new = rng.random(users) < NEW_USERS
    length = np.where(new, rng.integers(0, HISTORY, size=users), HISTORY)
    exposure = np.exp(EXPOSURE * bias)
    return {"vectors": vectors, "bias": bias, "taste": taste, "new": new, "length": length,
            "exposure": exposure / exposure.sum()}


def make_rows(rng: np.random.Generator, world: dict, rows: int) -> dict:
    """One span's rows: arrays of user and item indices, history indices (-1: none), ..."""
    vectors, bias, taste = world["vectors"], world["bias"], world["taste"]
    items, users = len(bias), len(taste)
    user = rng.integers(0, users, size=rows)
    length = world["length"][user].copy()
    length[(~world["new"][user]) & (rng.random(rows) < LONG_ROWS)] = LONG
    history = np.full((rows, LONG), -1, dtype=np.int64)
    chunk = 4096
    for start in range(0, rows, chunk):
        stop = min(rows, start + chunk)
        # Sampling without replacement from softmax(logits): the largest logits + Gumbel noise,
        # in decreasing order, are the draws in their order (the Gumbel top-k trick).
        logits = taste[user[start:stop]] @ vectors.T / TEMPERATURE
        keys = logits + rng.gumbel(size=logits.shape)
        top = np.argpartition(-keys, LONG, axis=1)[:, :LONG]
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1, kind="stable")
        drawn = np.take_along_axis(top, order, axis=1)
        # The last draw is the oldest click: reversed, the list is oldest first.
        history[start:stop] = drawn[:, ::-1]
    keep = np.arange(LONG)[None, :] >= (LONG - length)[:, None]
    history = np.where(keep, history, -1)
    popular = rng.random(rows) < POPULAR_SHARE
    item = np.where(popular, rng.choice(items, size=rows, p=world["exposure"]),
                    rng.integers(0, items, size=rows))
    affinity = np.einsum("ij,ij->i", taste[user], vectors[item])
    probability = sigmoid(A * affinity + B * bias[item] + C)
    clicked = (rng.random(rows) < probability).astype(np.int64)
    hour_weights = 1.0 + 0.6 * np.sin((np.arange(24) - 9) / 24.0 * 2 * np.pi)
    hour = rng.choice(24, size=rows, p=hour_weights / hour_weights.sum())
    device = rng.choice(len(DEVICES), size=rows, p=DEVICE_SHARES)
    return {"user": user, "item": item, "history": history, "hour": hour, "device": device,
            "probability": probability, "clicked": clicked}


def write_csv(path: Path, data: dict, style: dict, items: int) -> int:
    user_id, item_id, base = style["user"], style["item"], style["item_base"]
    names = [item_id.format(base + j) for j in range(items)]
    lines = [",".join(style["columns"])]
    for u, i, h, hour, d, c in zip(data["user"], data["item"], data["history"], data["hour"],
                                   data["device"], data["clicked"], strict=True):
        cell = "|".join(names[j] for j in h if j >= 0)
        lines.append(f"{user_id.format(u)},{names[i]},{cell},{hour},{style['devices'][d]},{c}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    path.write_bytes(text.encode("ascii"))
    return len(text)


def click_rates(item: np.ndarray, clicked: np.ndarray, items: int, prior: float = 5.0):
    """Each item's click rate, shrunk towards the overall rate by `prior` pseudo-rows."""
    overall = clicked.mean()
    shown = np.bincount(item, minlength=items)
    clicks = np.bincount(item, weights=clicked, minlength=items)
    return (clicks + prior * overall) / (shown + prior)


def history_features(data: dict, world: dict) -> np.ndarray:
    vectors, bias = world["vectors"], world["bias"]
    present = data["history"] >= 0
    summed = (vectors[np.maximum(data["history"], 0)] * present[..., None]).sum(axis=1)
    mean = summed / np.maximum(present.sum(axis=1), 1)[:, None]
    dot = np.einsum("ij,ij->i", mean, vectors[data["item"]])
    return np.column_stack([dot, bias[data["item"]], np.ones(len(dot))])


def fit_logistic(x: np.ndarray, y: np.ndarray, steps: int = 25) -> np.ndarray:
    """Newton's method for the logistic regression of y on x (a small ridge for stability)."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = sigmoid(x @ w)
        gradient = x.T @ (p - y) + 1e-6 * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + 1e-6 * np.eye(x.shape[1])
        w -= np.linalg.solve(hessian, gradient)
    return w


def score(train: dict, test: dict, world: dict) -> dict:
    items = len(world["bias"])
    rates = click_rates(train["item"], train["clicked"], items)
    w = fit_logistic(history_features(train, world), train["clicked"])
    y = test["clicked"]
    return {"achievable": auc(test["probability"], y), "popularity": auc(rates[test["item"]], y),
            "popularity_true_bias": auc(world["bias"][test["item"]], y),
            "history": auc(history_features(test, world) @ w, y)}


def concat(parts: list) -> dict:
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def split(data: dict, mask: np.ndarray) -> dict:
    return {key: value[mask] for key, value in data.items()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument("--spans", type=int, default=None,
                        help="dated spans, one a day (default 3; --style unseen: 1)")
    parser.add_argument("--rows", type=int, default=30000, help="rows per span")
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--users", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--start", default="20240101", help="the first span's date, YYYYMMDD")
    parser.add_argument("--style", choices=sorted(STYLES), default="standard",
                        help="unseen: one file, purchases.csv, with other names (see above)")
    args = parser.parse_args(argv)
    style = STYLES[args.style]
    spans = args.spans if args.spans is not None else (1 if args.style == "unseen" else 3)
    if args.style == "unseen" and spans != 1:
        parser.error("--style unseen writes one file: --spans 1")
    if spans < 1 or args.rows < 2 or args.items < LONG + 1 or args.users < 1:
        parser.error("need --spans >= 1, --rows >= 2, --items > 12, --users >= 1")

    world = make_world(args.seed, args.items, args.users)
    start = datetime.datetime.strptime(args.start, "%Y%m%d").date()
    parts, files = [], {}
    for k in range(spans):
        data = make_rows(np.random.default_rng([args.seed, 1 if spans > 1 else 2, k]), world,
                         args.rows)
        if args.style == "unseen":
            name, path = style["file"], args.out / style["file"]
        else:
            name = f"span-{(start + datetime.timedelta(days=k)).strftime('%Y%m%d')}"
            path = args.out / name / style["file"]
        size = write_csv(path, data, style, args.items)
        files[name] = {"rows": int(len(data["clicked"])), "positives": int(data["clicked"].sum()),
                       "bytes": size}
        parts.append(data)

    if spans > 1:
        aucs = score(concat(parts[:-1]), parts[-1], world)
        evaluated = list(files)[-1]
    else:   # one file: each half scored by what the other half taught, the AUCs averaged
        half = np.arange(len(parts[0]["clicked"])) % 2 == 0
        a, b = split(parts[0], half), split(parts[0], ~half)
        first, second = score(a, b, world), score(b, a, world)
        aucs = {key: (first[key] + second[key]) / 2 for key in first}
        evaluated = list(files)[0] + " (halves)"
    everything = concat(parts)
    report = {
        "style": args.style, "seed": args.seed, "items": args.items, "users": args.users,
        "rows": int(len(everything["clicked"])),
        "positive_rate": round(float(everything["clicked"].mean()), 4),
        "files": files, "evaluated_on": evaluated,
        "auc": {key: round(value, 4) for key, value in aucs.items()},
    }
    line = json.dumps(report, sort_keys=True)
    (args.out / "generation.json").write_text(json.dumps(report, sort_keys=True, indent=2) + "\n")
    print(line)
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
