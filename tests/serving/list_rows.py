"""A recommender-like config of the serving tests' own (neutral columns: an id candidate, a
categorical list sharing its vocabulary, a numeric list, `retrieval:`) and rows in its layout."""
from __future__ import annotations

from pathlib import Path

from tests.helpers import write_config

HEADER = "uid,item,hist,waits,hr,dev,clk"
# Lists of 3, 1 and 0 values (an empty cell), 2, 0 and 3 numbers; a missing number (NA).
GOOD = (f"{HEADER}\n"
        "u1,i2,i1|i3|i4,1.5|2,7,mobile,1\n"
        "u2,i1,i4,,20,desktop,0\n"
        "u3,i3,,3|4|0.5,NA,tablet,1\n")
FEATURES = {"label": "clk", "numeric": ["hr"], "categorical": ["dev"],
            "ids": {"item": {"top_k": 100, "oov_buckets": 2}},
            "lists": {"hist": {"element": "categorical", "length": 5, "vocabulary": "item"},
                      "waits": {"element": "numeric", "length": 3}},
            "ignored": ["uid"]}


def recs_config(folder: Path, retrieval: bool = True) -> Path:
    return write_config(folder, {
        "features": FEATURES, "schema_file": None, "serving.model_name": "recs",
        "task": {"kind": "binary", "positive_class": "1"},
        "evaluation.thresholds": {"AUC": {"lower_bound": 0.6}},
        "retrieval": {"candidate": "item", "k": 3} if retrieval else None})


def write(folder: Path, text: str, name: str = "rows.csv") -> Path:
    path = folder / name
    path.write_text(text)
    return path
