"""pipeline.init: a new pipeline from one CSV. Unit tests of the inference here; the whole
session (init, then the printed command, to a pushed model) in tests/test_init_e2e.py."""
from __future__ import annotations

import csv
import random
import re

import pytest

from pipeline.init import InitError, accuracy_floor, infer_columns

NULLS = ["NA", ""]


def fruit_csv(path, rows=200, seed=1):
    """Fruit to classify by weight, diameter and colour, with an id and a constant column."""
    rng = random.Random(seed)
    shapes = {"apple": (150, 7, ["red", "green"]), "orange": (200, 8, ["orange"]),
              "melon": (1500, 20, ["green", "yellow"])}
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "weight_g", "diameter_cm", "color", "farm", "kind"])
        for i in range(rows):
            kind = rng.choice(sorted(shapes))
            weight, diameter, colors = shapes[kind]
            out.writerow([f"f{i}", round(rng.gauss(weight, weight * 0.1), 1),
                          "NA" if i % 17 == 0 else round(rng.gauss(diameter, 1), 2),
                          rng.choice(colors), "north", kind])
    return path


def write_rows(path, header, rows):
    path.write_text("\n".join([",".join(header), *[",".join(map(str, r)) for r in rows]]) + "\n")
    return path


def test_kinds_come_from_the_cells(tmp_path):
    columns = infer_columns(fruit_csv(tmp_path / "fruit.csv"), "kind", NULLS)
    assert columns.numeric == ["weight_g", "diameter_cm"]  # NA cells are missing, not text
    assert columns.categorical == ["color"]
    assert set(columns.ignored) == {"id", "farm"}
    assert "distinct values" in columns.ignored["id"] and "one value" in columns.ignored["farm"]
    assert set(columns.classes) == {"apple", "orange", "melon"} and columns.rows == 200


def test_the_accuracy_floor_is_what_the_majority_class_scores():
    from pipeline.init import Columns

    assert accuracy_floor(Columns("y", classes={"a": 70, "b": 30})) == 0.7
    assert accuracy_floor(Columns("y", classes={"a": 2, "b": 1})) == 0.67  # rounded up


@pytest.mark.parametrize("header, rows, label, words", [
    (["x", "price"], [[i, i * 1.37] for i in range(50)], "price", "looks like a number"),
    (["x", "y"], [[i, "same"] for i in range(50)], "y", "1 value(s)"),
    (["x", "x", "y"], [[1, 2, "a"]], "y", "names ['x'] more than once"),
    (["x", "y"], [[1, "a"]], "label", "no column 'label'"),
    (["x", "y"], [], "y", "no rows"),
    (["x", "y"], [[1, "a"], [2]], "y", "line 3: 1 cells for 2 columns"),
])
def test_data_that_cannot_start_a_pipeline_says_why(tmp_path, header, rows, label, words):
    with pytest.raises(InitError, match=re.escape(words)):
        infer_columns(write_rows(tmp_path / "data.csv", header, rows), label, NULLS)


def test_integer_classes_are_classes(tmp_path):
    path = write_rows(tmp_path / "d.csv", ["x", "grade"], [[i, i % 3] for i in range(60)])
    assert infer_columns(path, "grade", NULLS).classes == {"0": 20, "1": 20, "2": 20}
