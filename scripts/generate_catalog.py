"""Writes the recommender's item catalog (data/catalog/items.csv): one row per item of the log.

The recommend endpoint (service/endpoint) joins its answers with this file and drops the columns
configs/recommender_service.yaml marks sensitive (`price` and `unit_cost` here: what the design
notes' example says must never leave the service). Deterministic: numpy's generator with a seed.

    python scripts/generate_catalog.py --out data/catalog/items.csv --items 400 --seed 11
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

CATEGORIES = ["books", "music", "garden", "kitchen", "toys", "sports", "outdoor", "office"]
ADJECTIVES = ["compact", "classic", "deluxe", "everyday", "folding", "handmade", "light", "pro"]
NOUNS = ["lamp", "kettle", "notebook", "speaker", "backpack", "puzzle", "trowel", "racket"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--item-base", type=int, default=1000,
                        help="the first item's number (scripts/generate_clicks.py: sku1000)")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["item_id", "title", "category", "price", "unit_cost"])
        for i in range(args.items):
            price = round(float(rng.uniform(3, 120)), 2)
            writer.writerow([f"sku{args.item_base + i}",
                             f"{ADJECTIVES[rng.integers(len(ADJECTIVES))]} "
                             f"{NOUNS[rng.integers(len(NOUNS))]}",
                             CATEGORIES[rng.integers(len(CATEGORIES))], f"{price:.2f}",
                             f"{price * float(rng.uniform(0.3, 0.7)):.2f}"])
    print(f"wrote {args.items} items to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
