"""Brute-force top-k retrieval (components/trainer/retrieval.py): a SavedModel's `retrieve`
signature answers numpy's exact top k, through TF2's loader, the TF1 session loader TF Serving
uses and `saved_model_cli run`."""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import run_cli

N, DIM, K, FEATURES = 500, 8, 5, 4
INPUT = "query_features"


def reference(embeddings: np.ndarray, queries: np.ndarray, k: int):
    """(indices, scores) of the k best candidates per query, best first, in float64."""
    scores = queries.astype(np.float64) @ embeddings.astype(np.float64).T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tf_keras query tower (one Dense layer) with the module as an attribute, saved as the
    export does: model.save with a `retrieve` signature of flat keyword inputs."""
    import tensorflow as tf
    import tf_keras as keras
    from components.trainer.retrieval import BruteForceTopK, retrieval_signature

    rng = np.random.default_rng(23)
    embeddings = rng.normal(size=(N, DIM)).astype(np.float32)
    ids = [f"item-{i:04d}" for i in range(N)]
    inputs = keras.Input(shape=(FEATURES,), name=INPUT)
    tower = keras.Model(inputs, keras.layers.Dense(DIM, use_bias=False)(inputs))
    tower.retrieval = BruteForceTopK(embeddings, ids, K)
    signature = retrieval_signature(tower.retrieval, lambda features: tower(features[INPUT]),
                                    {INPUT: tf.TensorSpec([None, FEATURES], tf.float32)})
    folder = tmp_path_factory.mktemp("retrieval") / "1"
    tower.save(str(folder), save_format="tf", signatures={"retrieve": signature})
    weights = tower.layers[-1].kernel.numpy()
    return folder, embeddings, np.array(ids, dtype=object), weights


def check_answer(outputs, features, exported_model):
    _, embeddings, ids, weights = exported_model
    indices, scores = reference(embeddings, features @ weights, K)
    assert outputs["item_ids"].shape == (len(features), K)
    assert outputs["scores"].dtype == np.float32
    assert [[i.decode() for i in row] for row in outputs["item_ids"]] == ids[indices].tolist()
    np.testing.assert_allclose(outputs["scores"], scores, rtol=1e-5, atol=1e-5)


def queries(count: int) -> np.ndarray:
    return np.random.default_rng(7).normal(size=(count, FEATURES)).astype(np.float32)


def test_retrieve_answers_exact_top_k(exported):
    import tensorflow as tf

    retrieve = tf.saved_model.load(str(exported[0])).signatures["retrieve"]
    features = queries(6)
    outputs = retrieve(**{INPUT: tf.constant(features)})
    check_answer({k: v.numpy() for k, v in outputs.items()}, features, exported)
    # One query at a time gives the same rows (a single REST instance).
    one = retrieve(**{INPUT: tf.constant(features[2:3])})
    assert one["item_ids"].numpy().tolist() == outputs["item_ids"].numpy()[2:3].tolist()


def test_retrieve_through_tf_serving_loader(exported):
    """The TF1 loader in a session, as TF Serving runs the signature."""
    import tensorflow as tf
    from devtools.tf_serving.session_model import SessionModel

    model = SessionModel(exported[0])
    spec = model.signatures["retrieve"]
    assert spec.method_name == "tensorflow/serving/predict"
    assert {k: v.dtype for k, v in spec.outputs.items()} == {
        "item_ids": tf.string.as_datatype_enum, "scores": tf.float32.as_datatype_enum}
    assert [d.size for d in spec.outputs["item_ids"].tensor_shape.dim] == [-1, K]
    features = queries(3)
    check_answer(model.run("retrieve", {INPUT: features}), features, exported)


@pytest.mark.e2e  # a TensorFlow process of its own
def test_saved_model_cli_runs_retrieve(exported, tmp_path):
    features = queries(2)
    result = run_cli("tensorflow.python.tools.saved_model_cli", "run", "--dir", str(exported[0]),
                     "--tag_set", "serve", "--signature_def", "retrieve", "--outdir",
                     str(tmp_path), "--overwrite", f"--input_exprs={INPUT}={features.tolist()!r}",
                     timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    outputs = {name: np.load(tmp_path / f"{name}.npy", allow_pickle=True)
               for name in ("item_ids", "scores")}
    # The CLI evaluates the expression in float64 and feeds it as the signature's float32.
    check_answer(outputs, features, exported)


def test_k_larger_than_the_candidates_is_clamped():
    import tensorflow as tf
    from components.trainer.retrieval import BruteForceTopK

    embeddings = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]], np.float32)
    module = BruteForceTopK(embeddings, ["a", "b", "c"], k=10)
    assert (module.k, module.requested_k) == (3, 10)
    outputs = module(tf.constant([[1.0, 0.0], [0.0, 2.0]]))
    # Equal scores: the lower candidate index first (tf.math.top_k's order).
    assert outputs["item_ids"].numpy().tolist() == [[b"a", b"c", b"b"], [b"b", b"a", b"c"]]
    np.testing.assert_array_equal(outputs["scores"].numpy(), [[1, 1, 0], [2, 0, 0]])


@pytest.mark.parametrize("embeddings, ids, k, message", [
    (np.zeros((2, 3)), ["a", "b"], 0, "k must be a positive integer"),
    (np.zeros((2, 3)), ["a", "b"], 1.5, "k must be a positive integer"),
    (np.zeros((2, 3)), ["a"], 1, "2 candidate embeddings but 1 ids"),
    (np.zeros(3), ["a", "b", "c"], 1, "non-empty \\[N, d\\]"),
    (np.zeros((0, 3)), [], 1, "non-empty \\[N, d\\]"),
    (np.array([[np.nan, 0.0]]), ["a"], 1, "NaN or infinite"),
])
def test_bad_candidates_are_refused(embeddings, ids, k, message):
    from components.trainer.retrieval import BruteForceTopK

    with pytest.raises(ValueError, match=message):
        BruteForceTopK(embeddings, ids, k)
    with pytest.raises(TypeError, match="str or bytes"):
        BruteForceTopK(np.zeros((2, 3)), [1, 2], 1)


def test_candidate_embeddings_of_ids_one_to_n_in_batches():
    import tf_keras as keras
    from components.trainer.retrieval import candidate_embeddings

    inputs = keras.Input(shape=(1,), dtype="int64", name="item_xf")
    layer = keras.layers.Embedding(30, 4)
    tower = keras.Model({"item_xf": inputs}, keras.layers.Flatten()(layer(inputs)))
    table = layer.embeddings.numpy()
    got = candidate_embeddings(tower, "item_xf", 20, batch_size=7)  # batches of 7, 7 and 6
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, table[1:21])  # row 0 (padding) left out
    with pytest.raises(ValueError, match="no candidates"):
        candidate_embeddings(tower, "item_xf", 0)
