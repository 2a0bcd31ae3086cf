"""Id and list features through the reader and real TFT: shared vocabularies, OOV and padding ids,
truncation, empty lists, ragged lists, hashing, numeric lists; and both models on them."""
from __future__ import annotations

import functools

import numpy as np
import pytest

CSV = """clicked,hour,item,history,scores,tags
1,3,a,a|b|c,1|2|3,x|y
0,4,b,,,
1,5,a,c|c|c|c|b|a,4,y
0,NA,c,b|a|zz,NA,x
1,7,b,a,1|1,x|y|z
"""
FEATURES = {
    "label": "clicked", "numeric": ["hour"], "categorical": [],
    "ids": {"item": {"top_k": None, "oov_buckets": 2, "hash_buckets": None}},
    "lists": {
        "history": {"element": "categorical", "length": 3, "keep": "last", "padding": None,
                    "vocabulary": "item", "ids": {"top_k": None, "oov_buckets": 1,
                                                  "hash_buckets": None}},
        "scores": {"element": "numeric", "length": 2, "keep": "first", "padding": -9.0,
                   "vocabulary": None, "ids": {}},
        "tags": {"element": "categorical", "length": None, "keep": "last", "padding": None,
                 "vocabulary": None, "ids": {"top_k": None, "oov_buckets": 1,
                                             "hash_buckets": 5}}},
    "ignored": [], "list_separator": "|", "label_kind": "text"}
CUSTOM = {"features": FEATURES, "preprocessing": {"num_oov_buckets": 1},
          "task": {"kind": "binary", "positive_class": "1"}}


def _schema():
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    kinds = {"clicked": "BYTES", "hour": "FLOAT", "item": "BYTES", "history": "BYTES",
             "scores": "FLOAT", "tags": "BYTES"}
    return text_format.Parse("".join(
        f'feature {{ name: "{n}" type: {k} value_count {{ min: 0 }} }}\n'
        for n, k in kinds.items()), schema_pb2.Schema())


def _instances():
    from components.example_gen.csv_reader import parse_csv

    rows = []
    for example in parse_csv("clicks.csv", CSV, FEATURES, ["NA"]):
        row = {name: [] for name in ("clicked", "hour", "item", "history", "scores", "tags")}
        for name, feature in example.features.feature.items():
            row[name] = list(feature.float_list.value or feature.bytes_list.value)
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def transformed(tmp_path_factory):
    from components.transform import preprocessing_fn
    from tests.models.transform_rows import run_transform

    return run_transform(tmp_path_factory.mktemp("ids_lists"),
                         functools.partial(preprocessing_fn, custom_config=CUSTOM),
                         _instances(), _schema())


def test_the_reader_keeps_list_cells_as_lists_and_empty_cells_as_empty_lists():
    rows = _instances()
    assert rows[0]["history"] == [b"a", b"b", b"c"] and rows[0]["scores"] == [1.0, 2.0, 3.0]
    assert rows[1]["history"] == [] and rows[1]["scores"] == []   # empty cells: empty lists
    assert rows[3]["scores"] == []  # a null marker: missing


@pytest.mark.parametrize("cell, message", [
    ("a||b", "has an empty value between separators"),
])
def test_a_bad_list_cell_names_file_line_column_and_value(cell, message):
    from components.example_gen.csv_reader import DataError, parse_csv

    text = f"clicked,hour,item,history,scores,tags\n1,3,a,{cell},1,x\n"
    with pytest.raises(DataError, match=rf"clicks.csv, line 2, column 'history': '{cell}' "
                                        f"{message}"):
        list(parse_csv("clicks.csv", text, FEATURES, ["NA"]))
    text = "clicked,hour,item,history,scores,tags\n1,3,a,a,1|2|heavy,x\n1,3,a,a,1,x\n"
    with pytest.raises(DataError, match=r"clicks.csv, line 2, column 'scores': the list "
                                        r"'1\|2\|heavy' holds 'heavy' is not a number"):
        list(parse_csv("clicks.csv", text, FEATURES, ["NA"]))


def test_ids_share_one_vocabulary_with_padding_zero_and_oov_after_it(transformed):
    rows, output = transformed
    vocabulary = [v.decode() for v in output.vocabulary_by_name("item")]
    # Counted over the item column and the history together: c 6, a 5, b 5 (then by value).
    assert vocabulary[0] == "c" and set(vocabulary) == {"a", "b", "c", "zz"}
    id_of = {v: i + 1 for i, v in enumerate(vocabulary)}
    assert [int(r["item_xf"]) for r in rows] == [id_of[v] for v in "abacb"]
    # Keep the last 3, pad with 0 at the end; the history's ids are the item column's.
    assert [list(r["history_xf"]) for r in rows] == [
        [id_of["a"], id_of["b"], id_of["c"]], [0, 0, 0], [id_of["c"], id_of["b"], id_of["a"]],
        [id_of["b"], id_of["a"], id_of["zz"]], [id_of["a"], 0, 0]]


def test_an_id_unseen_in_training_gets_an_oov_id_and_a_missing_one_zero(transformed):
    import tensorflow as tf

    _, output = transformed
    size = output.vocabulary_size_by_name("item")
    layer = output.transform_features_layer()
    out = layer({"item": tf.sparse.from_dense(tf.constant([["never-seen"], [""]])),
                 "history": tf.sparse.from_dense(tf.constant([["never-seen", ""]])),
                 "hour": tf.sparse.from_dense(tf.constant([[1.0], [2.0]]))})
    unseen = int(out["item_xf"][0])
    assert size + 1 <= unseen <= size + 2  # one of the item column's 2 OOV buckets
    assert int(out["history_xf"][0][0]) > size


def test_numeric_lists_are_z_scored_truncated_and_padded(transformed):
    rows, _ = transformed
    values = np.array([1, 2, 3, 4, 1, 1], dtype=np.float32)  # every element present
    z = (values - values.mean()) / values.std()
    got = [list(r["scores_xf"]) for r in rows]
    np.testing.assert_allclose(got[0], z[:2], rtol=1e-5)           # keep: first
    assert got[1] == [-9.0, -9.0] and got[3] == [-9.0, -9.0]       # empty / missing: padding
    np.testing.assert_allclose(got[2], [z[3], -9.0], rtol=1e-5)


def test_a_ragged_hashed_list_keeps_each_length(transformed):
    rows, _ = transformed
    lengths = [len(r["tags_xf"]) if hasattr(r["tags_xf"], "__len__") else None for r in rows]
    assert lengths == [2, 0, 1, 1, 3]
    assert all(1 <= v <= 5 for r in rows for v in r["tags_xf"])  # 0 is padding


@pytest.mark.parametrize("module", ["model", "two_tower"])
def test_both_models_train_on_ids_and_lists(transformed, module):
    import importlib

    import tensorflow as tf
    from components import heads
    from core.tasks import TASKS
    from models.features import FeatureSpec, as_model_inputs

    rows, output = transformed
    custom = {**CUSTOM, "retrieval": {"candidate": "item", "k": 2}}
    spec = FeatureSpec.from_custom_config(custom)
    sizes = spec.categorical_sizes({v: output.vocabulary_size_by_name(v)
                                    for v in spec.vocabularies})
    assert sizes["item_xf"] == sizes["history_xf"] == 1 + 4 + 2 and sizes["tags_xf"] == 6
    head = heads.SigmoidHead(TASKS["binary"], ["0", "1"], 0.5)
    model = importlib.import_module(f"models.{module}").build_model(
        spec, sizes, head, learning_rate=0.01)
    batch = {}
    for key in rows[0]:
        if key == "tags_xf":  # ragged: as the input pipeline batches it
            batch[key] = tf.ragged.constant([list(r[key]) for r in rows], tf.int64).to_sparse()
        else:
            batch[key] = tf.constant(np.stack([r[key] for r in rows]))
    features = as_model_inputs(batch, spec)
    assert features["tags_xf"].shape == (5, 3) and features["history_xf"].shape == (5, 3)
    history = model.fit(features, batch["clicked_xf"], epochs=3, verbose=0).history
    assert all(np.isfinite(history["loss"]))  # an empty list averages to 0, not NaN
    if module == "two_tower":
        query = model.get_layer("query_tower")
        vectors = query({k: v for k, v in features.items() if k != "item_xf"}).numpy()
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
