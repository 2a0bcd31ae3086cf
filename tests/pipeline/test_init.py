"""pipeline.init: a new pipeline from one CSV. Unit tests of the inference here; the whole
session (init, then the printed command, to a pushed model) in tests/test_init_e2e.py."""
from __future__ import annotations

import csv
import random
import re

import pytest

from core.tasks import TASKS, LabelSample, accuracy_floor, median_deviation
from pipeline.init import InitError, infer_columns, infer_task

from tests.helpers import dump_yaml

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
    assert accuracy_floor(LabelSample("y", {"a": 70, "b": 30}, False)) == 0.7
    assert accuracy_floor(LabelSample("y", {"a": 2, "b": 1}, False)) == 0.67  # rounded up


@pytest.mark.parametrize("header, rows, label, words", [
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


def task_of(tmp_path, header, rows, label, requested=None):
    path = write_rows(tmp_path / "d.csv", header, rows)
    return infer_task(path, infer_columns(path, label, NULLS), requested)


def test_a_numeric_label_with_many_values_is_a_regression(tmp_path):
    assert task_of(tmp_path, ["x", "price"], [[i, i * 1.37] for i in range(50)],
                   "price").kind == "regression"
    assert task_of(tmp_path, ["x", "count"], [[i, i] for i in range(50)],  # integers, many
                   "count").kind == "regression"
    assert task_of(tmp_path, ["x", "grade"], [[i, i % 3] for i in range(60)],
                   "grade").kind == "multiclass"


@pytest.mark.parametrize("values, positive", [
    (["no", "yes", "no"], "yes"),          # the value that reads as yes
    (["0", "1", "1"], "1"),                # even when it is the majority
    (["True", "False", "False"], "True"),  # case ignored
    (["cat", "dog", "dog"], "cat"),        # neither reads as yes: the less frequent value
    (["cat", "dog"], "dog"),               # a tie: the later in sorted order
])
def test_a_two_valued_label_is_binary_with_a_documented_positive_class(tmp_path, values,
                                                                       positive):
    rows = [[i, values[i % len(values)]] for i in range(12 * len(values))]
    task = task_of(tmp_path, ["x", "y"], rows, "y")
    assert task.kind == "binary"
    assert task.settings == {"positive_class": positive, "decision_threshold": 0.5}
    assert f"positive class '{positive}'" in task.why


def test_task_overrides_are_checked_against_the_label(tmp_path):
    three = [[i, "abc"[i % 3]] for i in range(30)]
    with pytest.raises(InitError, match="--task binary needs a label with two values; 'y' has 3"):
        task_of(tmp_path, ["x", "y"], three, "y", "binary")
    with pytest.raises(InitError, match="--task regression needs a numeric label.*'a' is not a "
                                        "number"):
        task_of(tmp_path, ["x", "y"], three, "y", "regression")
    assert task_of(tmp_path, ["x", "y"], [[i, i % 2] for i in range(30)], "y",
                   "regression").kind == "regression"
    with pytest.raises(InitError, match="150 distinct values, too many classes.*--task "
                                        "regression"):
        task_of(tmp_path, ["x", "y"], [[i, i] for i in range(150)], "y", "multiclass")


def test_thresholds_fit_the_task(tmp_path):
    # A blessed regression model must beat always answering the median (3): |1-3|+0+|8-3| / 3.
    label = LabelSample("y", {"1": 1, "3": 1, "8": 1}, numeric=True)
    assert median_deviation(label) == pytest.approx(7 / 3)
    assert TASKS["regression"].init_thresholds(label) == {
        "MeanAbsoluteError": {"upper_bound": 2.333, "max_increase": 0.12}}
    assert TASKS["binary"].init_thresholds(label) == {
        "AUC": {"lower_bound": 0.7, "max_decrease": 0.02}}
    assert list(TASKS["multiclass"].init_thresholds(label)) == ["SparseCategoricalAccuracy"]


def test_the_written_thresholds_load_for_their_task(tmp_path):
    """What init writes is a config the loader accepts: each task's thresholds fit it."""

    from core.config import load_config
    from pipeline.init import Columns, TaskChoice, config_for

    (tmp_path / "data").mkdir()
    columns = Columns("y", numeric=["x"], classes={"1": 2, "0": 3, "5": 1}, label_numeric=True)
    for task in (TaskChoice("binary", {"positive_class": "1", "decision_threshold": 0.5}),
                 TaskChoice("regression"), TaskChoice("multiclass")):
        raw = config_for("t", columns, tmp_path / "data", tmp_path, tmp_path / "out", task=task)
        path = tmp_path / f"{task.kind}.yaml"
        path.write_text(dump_yaml(raw))
        assert load_config(path).task.kind == task.kind


def test_a_file_that_is_not_utf8_names_line_and_bytes(tmp_path):
    """Issue 25: pipeline.init showed a UnicodeDecodeError traceback."""
    path = tmp_path / "latin1.csv"
    path.write_bytes(("id,kind\n" + "a,x\n" * 5000).encode() + "b,caf\u00e9\n".encode("latin-1"))
    with pytest.raises(InitError, match=rf"{path}, line 5002: bytes b'\\xe9' at character 6 "
                                        "are not UTF-8; save the file as UTF-8"):
        infer_columns(path, "kind", NULLS)


def test_an_open_quote_or_a_huge_cell_is_an_init_error(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("id,kind\n" + "a,x\n" * 10 + 'b,"' + "y" * 200_000 + "\n")
    with pytest.raises(InitError, match="field larger than field limit.*quote left open"):
        infer_columns(path, "kind", NULLS)
