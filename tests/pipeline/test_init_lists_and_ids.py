"""pipeline.init on click-log-like CSVs: list columns (cells holding data.list_separator), id
columns (text with many repeated values), what it ignores, the vocabulary a history shares with an
id column, the two-tower recommender that follows, the printout's reasons, and the pipeline's own
name in every path of the written config. Small generated CSVs; no TensorFlow."""
from __future__ import annotations

import random

import pytest

from core.config import DEFAULT_CONFIG
from pipeline.init import (ID_OOV_BUCKETS, TWO_TOWER_MODEL, Columns, TaskChoice, config_for,
                           describe, infer_columns, infer_task, main)
from tests.helpers import dump_yaml, load_yaml
from tests.pipeline.test_init import NULLS, write_rows

BINARY = TaskChoice("binary", {"positive_class": "1", "decision_threshold": 0.5})


def click_log(path, rows=600, items=150, seed=5, history_items=None, sep="|"):
    """A click log: a unique request id, a repeated item id (items values), a history of items
    (0 to 8 of them; history_items: drawn from these instead), a numeric list, a context column,
    a constant and a 0/1 label."""
    rng = random.Random(seed)
    catalogue = [f"it{i}" for i in range(items)]
    pool = history_items or catalogue
    table = []
    for r in range(rows):
        history = sep.join(rng.choice(pool) for _ in range(rng.randint(0, 8)))
        prices = sep.join(f"{rng.uniform(1, 9):.2f}" for _ in range(rng.randint(2, 4)))
        table.append([f"req{r}", catalogue[r % items], history, prices,
                      rng.choice(["ios", "web"]), "v1", r % 2])
    return write_rows(path, ["request", "item", "history", "prices", "device", "build",
                             "clicked"], table)


def test_a_column_whose_cells_hold_the_separator_is_a_list_of_its_element_kind(tmp_path):
    columns = infer_columns(click_log(tmp_path / "c.csv", history_items=["x", "y", "z"]),
                            "clicked", NULLS)
    assert columns.lists["prices"] == {"element": "numeric", "length": 4, "keep": "last"}
    # "x", "y", "z" are no item's: the history has a vocabulary of its own.
    assert columns.lists["history"] == {"element": "categorical", "length": 8, "keep": "last",
                                        "ids": {"top_k": 5, "oov_buckets": ID_OOV_BUCKETS}}
    assert columns.numeric == [] and columns.categorical == ["device"]


def test_a_lists_length_is_the_95th_percentile_of_the_lengths_seen(tmp_path):
    # 100 cells: 90 of length 2, 5 of 3, 5 of 30: the 95th is 3, not the longest.
    cells = ["a|b"] * 90 + ["a|b|c"] * 5 + ["|".join("a" * 30)] * 5
    path = write_rows(tmp_path / "d.csv", ["tags", "y"], [[c, i % 2] for i, c in enumerate(cells)])
    assert infer_columns(path, "y", NULLS).lists["tags"]["length"] == 3
    # Empty cells (a null marker: empty lists) are not counted: half the cells are empty.
    cells = ["", "a|c", "", "b|c"] * 10
    path = write_rows(tmp_path / "e.csv", ["tags", "y"], [[c, i % 2] for i, c in enumerate(cells)])
    assert infer_columns(path, "y", NULLS).lists["tags"]["length"] == 2
    assert infer_columns(path, "y", ["NA"]).lists["tags"]["length"] == 2  # "" no null marker


def test_a_repeated_text_column_with_many_values_is_an_id(tmp_path):
    columns = infer_columns(click_log(tmp_path / "c.csv", history_items=["x"]), "clicked", NULLS)
    # 150 values seen, each in 4 rows: a vocabulary with room (225 -> 500) and OOV buckets.
    assert columns.ids == {"item": {"top_k": 500, "oov_buckets": ID_OOV_BUCKETS}}
    assert columns.why["item"] == "id (150 distinct values over 600 rows)"
    assert "item" not in columns.ignored and "item" not in columns.categorical


@pytest.mark.parametrize("distinct, kind", [
    (600, "ignored"),  # unique per row
    (560, "ignored"),  # 93%: nearly unique, over UNIQUE_SHARE
    (500, "id"),       # 83%: repeats
    (101, "id"),       # over ONE_HOT_MAX
    (100, "categorical"),
])
def test_only_columns_unique_per_row_or_nearly_are_ignored(tmp_path, distinct, kind):
    path = write_rows(tmp_path / "d.csv", ["code", "x", "y"],
                      [[f"c{i % distinct}", i, i % 2] for i in range(600)])
    columns = infer_columns(path, "y", NULLS)
    assert columns.why["code"].startswith(kind)
    assert ("code" in columns.ignored) == (kind == "ignored")


def test_constant_and_always_missing_columns_are_ignored(tmp_path):
    columns = infer_columns(click_log(tmp_path / "c.csv"), "clicked", NULLS)
    assert columns.ignored == {
        "request": "unique per row: 600 distinct values over 600 rows",
        "build": "one value in every row"}
    path = write_rows(tmp_path / "d.csv", ["x", "gone", "y"], [[i, "NA", i % 2] for i in range(9)])
    assert infer_columns(path, "y", NULLS).ignored == {"gone": "always missing"}


def test_a_history_of_an_id_columns_values_shares_its_vocabulary(tmp_path):
    columns = infer_columns(click_log(tmp_path / "c.csv"), "clicked", NULLS)
    assert columns.lists["history"] == {"element": "categorical", "length": 8, "keep": "last",
                                        "vocabulary": "item"}
    assert columns.candidate == "item"
    assert "shares item's vocabulary (100% of its values are item values)" in \
        columns.why["history"]


def test_the_shared_vocabulary_has_room_for_the_values_the_history_adds(tmp_path):
    # The history holds 150 items, of which the item column shows only 100 (in 600 rows).
    history = [f"it{i}" for i in range(150)]
    columns = infer_columns(click_log(tmp_path / "c.csv", items=100, history_items=history),
                            "clicked", NULLS)
    assert columns.lists["history"]["vocabulary"] == "item"  # 2/3 of its values are items
    assert columns.ids["item"]["top_k"] == 500  # 150 seen -> 225 -> 500, not 100 -> 200


def test_a_history_of_mostly_other_values_keeps_a_vocabulary_of_its_own(tmp_path):
    others = [f"zz{i}" for i in range(300)]
    columns = infer_columns(click_log(tmp_path / "c.csv", history_items=others + ["it1"]),
                            "clicked", NULLS)
    assert "vocabulary" not in columns.lists["history"]
    assert columns.lists["history"]["ids"] == {"top_k": 500, "oov_buckets": ID_OOV_BUCKETS}
    assert columns.candidate is None


def test_a_categorical_column_whose_values_a_history_holds_becomes_an_id(tmp_path):
    columns = infer_columns(click_log(tmp_path / "c.csv", items=20), "clicked", NULLS)
    assert "item" in columns.ids and "item" not in columns.categorical
    assert columns.lists["history"]["vocabulary"] == "item"
    assert "categorical by its cells, but history holds its values" in columns.why["item"]


def test_integer_item_ids_and_a_history_of_them_are_ids_not_numbers(tmp_path):
    rng = random.Random(2)
    rows = [[r % 150, "|".join(str(rng.randrange(150)) for _ in range(rng.randint(0, 6))),
             rng.random(), r % 2] for r in range(600)]
    columns = infer_columns(write_rows(tmp_path / "d.csv", ["item", "history", "price", "y"],
                                       rows), "y", NULLS)
    assert columns.numeric == ["price"] and list(columns.ids) == ["item"]
    assert columns.lists["history"] == {"element": "categorical", "length": 6, "keep": "last",
                                        "vocabulary": "item"}
    assert "integers, ids of item" in columns.why["history"]


def test_too_few_separated_cells_or_empty_values_are_no_list(tmp_path):
    # 10% of the cells hold '|' (a brand "A|B"): a categorical column that says so.
    path = write_rows(tmp_path / "d.csv", ["brand", "y"],
                      [["a|b" if i % 10 == 0 else f"b{i % 4}", i % 2] for i in range(100)])
    columns = infer_columns(path, "y", NULLS)
    assert columns.categorical == ["brand"] and not columns.lists
    assert "10% of cells hold '|', too few for a list" in columns.why["brand"]
    # 'a||b' has an empty value, which the reader refuses in a list.
    path = write_rows(tmp_path / "e.csv", ["tags", "y"],
                      [["a||b" if i == 3 else "a|b", i % 2] for i in range(100)])
    columns = infer_columns(path, "y", NULLS)
    assert not columns.lists
    assert "1 cells hold an empty value between '|'" in columns.why["tags"]


def test_the_separator_is_the_one_given(tmp_path):
    columns = infer_columns(click_log(tmp_path / "c.csv", sep=";"), "clicked", NULLS, ";")
    assert columns.lists["history"]["vocabulary"] == "item"
    assert columns.separator == ";"
    raw = config_for("c", columns, tmp_path, tmp_path, tmp_path / "out", task=BINARY)
    assert raw["data"]["list_separator"] == ";"


def test_a_separator_that_is_csv_syntax_is_refused_before_anything_is_written(tmp_path, capsys):
    path = click_log(tmp_path / "c.csv")
    code = main(["--csv", str(path), "--label", "clicked", "--list-separator", ",",
                 "--configs", str(tmp_path / "configs"), "--data", str(tmp_path / "data")])
    assert code == 2 and "--list-separator ','" in capsys.readouterr().err
    assert not (tmp_path / "configs").exists() and not (tmp_path / "data").exists()


def test_a_binary_label_and_a_shared_history_choose_the_two_tower_recommender(tmp_path):
    path = click_log(tmp_path / "c.csv")
    columns = infer_columns(path, "clicked", NULLS)
    task = infer_task(path, columns)
    assert task.kind == "binary"
    raw = config_for("clicks", columns, tmp_path / "data", tmp_path, tmp_path / "out", task=task)
    assert raw["model_module"] == "two_tower"
    assert raw["model"] == TWO_TOWER_MODEL
    assert raw["training"]["batch_size"] == 256
    assert 500 <= raw["training"]["train_steps"] <= 5000
    assert raw["retrieval"] == {"candidate": "item", "k": 10}
    assert raw["data"]["list_separator"] == "|"
    assert raw["features"] == {
        "label": "clicked", "numeric": [], "categorical": ["device"],
        "ids": {"item": {"top_k": 500, "oov_buckets": ID_OOV_BUCKETS}},
        "lists": {"history": {"element": "categorical", "length": 8, "keep": "last",
                              "vocabulary": "item"},
                  "prices": {"element": "numeric", "length": 4, "keep": "last"}},
        "ignored": ["request", "build"]}
    # The file's order: the model's module, then its hyper-parameters.
    keys = list(raw)
    assert keys.index("model_module") + 1 == keys.index("model") < keys.index("retrieval")
    assert "&id" not in dump_yaml(raw)  # no YAML anchors between shared settings


def test_the_recommenders_config_loads(tmp_path, monkeypatch):
    """What init writes for the recommender is a config the loader accepts (with the lead's
    models/two_tower.py, or until it is on this branch a stand-in with its hyper-parameters)."""
    from core import hyperparameters
    from core.config import load_config

    try:
        hyperparameters.model_source("two_tower")
    except ValueError:
        stand_in = tmp_path / "two_tower.py"
        stand_in.write_text("def build_model(*, embedding_dim: int, tower_units: int, "
                            "learning_rate: float):\n    pass\n")
        real = hyperparameters.model_source
        monkeypatch.setattr(hyperparameters, "model_source", lambda module="model": (
            stand_in if module == "two_tower" else real(module)))
    path = click_log(tmp_path / "c.csv")
    columns = infer_columns(path, "clicked", NULLS)
    (tmp_path / "data").mkdir()
    raw = config_for("clicks", columns, tmp_path / "data", tmp_path, tmp_path / "out",
                     task=infer_task(path, columns))
    (tmp_path / "clicks.yaml").write_text(dump_yaml(raw, sort_keys=False))
    config = load_config(tmp_path / "clicks.yaml")
    assert config.model_module == "two_tower" and config.retrieval.candidate == "item"
    assert config.features.lists["history"].vocabulary == "item"


@pytest.mark.parametrize("case", ["multiclass", "no_shared_history"])
def test_otherwise_the_model_stays_the_default_one_and_the_config_loads(tmp_path, case):
    from core.config import load_config

    history = None if case == "multiclass" else ["x", "y"]
    columns = infer_columns(click_log(tmp_path / "c.csv", history_items=history), "clicked",
                            NULLS)
    task = TaskChoice("multiclass") if case == "multiclass" else BINARY
    (tmp_path / "data").mkdir()
    raw = config_for("clicks", columns, tmp_path / "data", tmp_path, tmp_path / "out", task=task)
    assert "model_module" not in raw and "retrieval" not in raw
    assert raw["model"] == load_yaml(DEFAULT_CONFIG.read_text())["model"]
    (tmp_path / "clicks.yaml").write_text(dump_yaml(raw, sort_keys=False))
    config = load_config(tmp_path / "clicks.yaml")
    assert set(config.features.lists) == {"history", "prices"}
    assert set(config.features.ids) == {"item"}


def test_the_printout_says_each_columns_kind_and_why(tmp_path):
    path = click_log(tmp_path / "c.csv")
    columns = infer_columns(path, "clicked", NULLS)
    assert describe(columns, infer_task(path, columns)) == [
        "  clicked: the label",
        "  request: ignored (unique per row: 600 distinct values over 600 rows)",
        "  item: id (150 distinct values over 600 rows)",
        "  history: list of categorical (88% of cells hold '|'), length 8 (95th percentile), "
        "keeping the last, shares item's vocabulary (100% of its values are item values)",
        "  prices: list of numeric (100% of cells hold '|'), length 4 (95th percentile), "
        "keeping the last",
        "  device: categorical (2 distinct values)",
        "  build: ignored (one value in every row)",
        "model: two_tower, retrieving item (top 10): a binary label and history sharing "
        "item's vocabulary"]
    assert describe(columns, TaskChoice("multiclass"))[-1].startswith("  build: ignored")


def strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def test_the_written_config_names_its_own_pipeline_in_every_path(tmp_path):
    template_name = load_yaml(DEFAULT_CONFIG.read_text())["pipeline_name"]
    columns = Columns("y", numeric=["x"], classes={"a": 1, "b": 2})
    raw = config_for("shop-orders", columns, tmp_path / "data", tmp_path, tmp_path / "out")
    assert [s for s in strings(raw) if template_name in s] == []
    kubeflow = raw["kubeflow"]
    assert kubeflow["pipeline_root"].endswith("/tfx/shop-orders")
    assert kubeflow["input_base"].endswith("/data/shop-orders")
    assert kubeflow["experiment"] == "shop-orders-nightly"


def test_the_template_name_is_replaced_as_a_whole_word_in_path_like_values(tmp_path):
    template = tmp_path / "template.yaml"
    raw = load_yaml(DEFAULT_CONFIG.read_text())
    raw["pipeline_name"] = "fish"
    raw["kubeflow"].update(pipeline_root="s3://b/tfx/fish", input_base="gs://b/fish/spans",
                           serving_dir="gs://b/fishes/serving", experiment="fish-nightly",
                           beam_args=["--temp_location=gs://b/fish/tmp", "--job_name=fish"])
    template.write_text(dump_yaml(raw))
    columns = Columns("y", numeric=["x"], classes={"a": 1, "b": 2})
    kubeflow = config_for("carp", columns, tmp_path, tmp_path, tmp_path / "out",
                          template=template)["kubeflow"]
    assert kubeflow["pipeline_root"] == "s3://b/tfx/carp"
    assert kubeflow["input_base"] == "gs://b/carp/spans"
    assert kubeflow["serving_dir"] == "gs://b/fishes/serving"  # another word
    assert kubeflow["experiment"] == "carp-nightly"
    # A path's segment is renamed; a value that is no path is left as it is.
    assert kubeflow["beam_args"] == ["--temp_location=gs://b/carp/tmp", "--job_name=fish"]


def test_for_the_recommender_an_id_no_list_shares_is_ignored_saying_why():
    from pipeline.init import Columns, drop_user_ids

    columns = Columns(label="clicked", ids={"item": {"top_k": 500}, "user": {"top_k": 5000}},
                      lists={"history": {"element": "categorical", "vocabulary": "item"}})
    columns.why.update(item="id (...)", user="id (...)", history="list (...)")
    drop_user_ids(columns, "item")
    assert list(columns.ids) == ["item"] and "user" in columns.ignored
    assert columns.why["user"].startswith("ignored (an id no list shares, e.g. the user's: "
                                          "history stands for the user")
