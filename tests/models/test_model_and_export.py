"""The network, and the exported SavedModel's signatures (both, plus TF Serving's loader)."""
from __future__ import annotations


import numpy as np
import pytest

from tests.helpers import run_cli
from tests.models.transform_rows import custom_config, raw_examples

pytestmark = pytest.mark.slow  # TensorFlow, TFT, TFMA or server work: not in make test-fast


@pytest.fixture(scope="module")
def exported(tmp_path_factory, transformed):
    import tensorflow as tf
    from components import heads
    from components.trainer import export
    from models.features import FeatureSpec, as_model_inputs
    from models.model import build_model

    folder = tmp_path_factory.mktemp("export")
    rows, output = transformed
    spec = FeatureSpec.from_custom_config(custom_config())
    sizes = spec.categorical_sizes({f: output.vocabulary_size_by_name(f) for f in spec.categorical})
    head = heads.fitted(None, output, spec, None)  # no task section: multiclass
    model = build_model(spec, sizes, head, hidden_units=[8], dropout=0.0, learning_rate=0.05)
    features = as_model_inputs({k: tf.constant([r[k] for r in rows]) for k in rows[0]}, spec)
    labels = tf.constant([r[spec.label_xf] for r in rows])
    model.fit(features, labels, epochs=30, verbose=0)
    examples_file = folder / "eval.gz"
    with tf.io.TFRecordWriter(str(examples_file), "GZIP") as writer:
        for example in raw_examples():
            writer.write(example.SerializeToString())
    serving_dir = folder / "serving" / "1"
    export.export_serving_model(model, head, output, spec, str(serving_dir), "penguins",
                                [str(examples_file)])
    return serving_dir, model, features


def test_model_outputs_float32_probabilities(exported):
    import tensorflow as tf

    _, model, features = exported
    probabilities = model(features).numpy()
    assert model.output.dtype == tf.float32
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_both_signatures_agree_and_missing_values_are_accepted(exported):
    import tensorflow as tf

    serving_dir, _, _ = exported
    loaded = tf.saved_model.load(str(serving_dir))
    serialized = [e.SerializeToString() for e in raw_examples()]
    by_example = loaded.signatures["serving_default"](examples=tf.constant(serialized))
    nan = float("nan")
    raw = {  # the same rows as named tensors; NaN / "" for the NA row
        "island": ["Torgersen", "Dream", "Biscoe", "Biscoe", "Dream", "Dream"],
        "sex": ["male", "", "female", "male", "female", "male"],
        "bill_length_mm": [39.1, nan, 46.1, 50.0, 46.5, 50.0],
        "bill_depth_mm": [18.7, nan, 13.2, 16.3, 17.9, 19.5],
        "flipper_length_mm": [181, nan, 211, 230, 192, 196],
        "body_mass_g": [3750, nan, 4500, 5700, 3500, 3900],
    }
    by_name = loaded.signatures["raw_features"](**{
        k: tf.constant(v, tf.string if isinstance(v[0], str) else tf.float32)
        for k, v in raw.items()})
    np.testing.assert_allclose(by_example["probabilities"], by_name["probabilities"], atol=1e-6)
    assert by_example["probabilities"].dtype == tf.float32
    np.testing.assert_allclose(by_example["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    names = [n.decode() for n in by_example["class_name"].numpy()]
    assert set(names) <= {"Adelie", "Gentoo", "Chinstrap"}
    assert names[0] == "Adelie" and names[3] == "Gentoo"


@pytest.mark.e2e  # a TensorFlow process of its own: too slow for `make test-fast`
def test_tf_serving_loader_runs_the_export(exported):
    """saved_model_cli uses the TF1 session loader, the path TF Serving takes."""
    serving_dir, _, _ = exported
    result = run_cli("tensorflow.python.tools.saved_model_cli", "run", "--dir", str(serving_dir),
                     "--tag_set", "serve", "--signature_def", "raw_features", "--input_exprs",
                     "island=['Biscoe'];sex=['male'];bill_length_mm=[50.0];bill_depth_mm=[16.3];"
                     "flipper_length_mm=[230.0];body_mass_g=[5700.0]", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "probabilities" in result.stdout and "class_name" in result.stdout


def test_warmup_requests_are_real_rows_for_both_signatures(exported):
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2
    from components.trainer import export

    serving_dir, _, _ = exported
    path = serving_dir / export.WARMUP_FILE
    requests = [prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request
                for r in tf.data.TFRecordDataset(str(path))]
    assert [(r.model_spec.signature_name, len(r.inputs)) for r in requests] == [
        ("serving_default", 1), ("serving_default", 1), ("raw_features", 6), ("raw_features", 6)]
    assert [len(r.inputs["examples"].string_val) for r in requests[:2]] == [1, 6]
    # The NA row (the second) warms the missing-value path: NaN and "".
    batch = requests[3].inputs
    assert np.isnan(tf.make_ndarray(batch["bill_length_mm"])[1])
    assert tf.make_ndarray(batch["sex"])[1] == b""
