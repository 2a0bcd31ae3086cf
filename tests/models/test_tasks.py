"""Binary and regression through the user's model code and the export, on a few penguin rows
through real TFT: the label each task trains on, its network's float32 output, and the
SavedModel's outputs as TF Serving's loader runs them (tests/test_init_e2e.py runs each task
through the whole pipeline)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.models.transform_rows import ROWS, analyze_and_transform, custom_config, raw_examples

pytestmark = pytest.mark.slow  # TensorFlow, TFT, TFMA or server work: not in make test-fast

BODY_MASS = [3750, None, 4500, 5700, 3500, 3900]  # ROWS' labels for the regression
# ROWS without the Chinstraps: two species, for a binary task.
TWO_SPECIES = "".join(line + "\n" for line in ROWS.splitlines() if "Chinstrap" not in line)


def task_config(task: dict, **features) -> dict:
    custom = custom_config()
    return {**custom, "task": task, "features": {**custom["features"], **features}}


REGRESSION = task_config({"kind": "regression"}, label="body_mass_g",
                         numeric=["bill_length_mm", "bill_depth_mm", "flipper_length_mm"],
                         categorical=["island", "sex", "species"])


def fitted(rows, output, custom, epochs=30):
    """(model, head): the task's head for these rows (a regression's scale from their labels),
    on the user's network, fitted."""
    import tensorflow as tf
    from components import heads
    from models.features import FeatureSpec, as_model_inputs
    from models.model import build_model

    spec = FeatureSpec.from_custom_config(custom)
    labels = np.array([r[spec.label_xf] for r in rows])
    head = heads.fitted(custom["task"], output, spec, lambda: labels)
    # Seeded: an unseeded fit of six rows once left both Gentoo rows on one dead-ReLU answer (the
    # mean of their labels) and failed the closeness check; seeded, every run fits the same way.
    tf.keras.utils.set_random_seed(0)
    sizes = spec.categorical_sizes({f: output.vocabulary_size_by_name(f)
                                    for f in spec.categorical})
    model = build_model(spec, sizes, head, hidden_units=[8], dropout=0.0, learning_rate=0.05)
    features = as_model_inputs({k: tf.constant([r[k] for r in rows]) for k in rows[0]}, spec)
    model.fit(features, tf.constant(labels), epochs=epochs, verbose=0)
    return model, head


def exported(folder, fit, output, custom):
    import tensorflow as tf
    from components.trainer import export
    from models.features import FeatureSpec

    model, head = fit
    spec = FeatureSpec.from_custom_config(custom)
    folder.mkdir(parents=True, exist_ok=True)
    examples_file = folder / "eval.gz"
    with tf.io.TFRecordWriter(str(examples_file), "GZIP") as writer:
        for example in raw_examples():
            writer.write(example.SerializeToString())
    serving_dir = folder / "serving" / "1"
    export.export_serving_model(model, head, output, spec, str(serving_dir), "m",
                                [str(examples_file)])
    from devtools.tf_serving.session_model import SessionModel

    return SessionModel(serving_dir)  # the TF1 loader, as TF Serving loads it


@pytest.fixture(scope="module")
def regression(tmp_path_factory):
    return analyze_and_transform(tmp_path_factory.mktemp("regression"), REGRESSION)


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    custom = task_config({"kind": "binary", "positive_class": "Gentoo",
                          "decision_threshold": 0.5})
    return analyze_and_transform(tmp_path_factory.mktemp("binary"), custom, TWO_SPECIES)


def test_a_regression_label_is_its_number_and_a_missing_one_the_mean(regression):
    rows, _ = regression
    present = [v for v in BODY_MASS if v is not None]
    expected = [np.mean(present) if v is None else v for v in BODY_MASS]
    np.testing.assert_allclose([r["body_mass_g_xf"] for r in rows], expected, rtol=1e-6)


def test_a_regression_model_answers_a_float32_value_in_the_labels_units(regression,
                                                                        tmp_path):
    import tensorflow as tf

    rows, output = regression
    labels = np.array([r["body_mass_g_xf"] for r in rows])
    fit = fitted(rows, output, REGRESSION, epochs=200)
    assert (fit[1].mean, fit[1].std) == pytest.approx((labels.mean(), labels.std()))
    assert fit[0].output.dtype == tf.float32
    session = exported(tmp_path, fit, output, REGRESSION)
    examples = [e.SerializeToString() for e in raw_examples()]
    answer = session.run("serving_default", {"examples": examples})
    assert set(answer) == {"value"} and answer["value"].dtype == np.float32
    assert answer["value"].shape == (len(examples),)
    # Trained on these rows: near their labels (a std of ~800 g), in grams.
    assert np.abs(answer["value"] - labels).max() < 300, (answer["value"], labels)
    for request in exported_warmup(tmp_path):
        assert set(session.run_request(request)) == {"value"}


def exported_warmup(folder):
    import tensorflow as tf
    from components.trainer import export
    from tensorflow_serving.apis import prediction_log_pb2

    path = folder / "serving" / "1" / export.WARMUP_FILE
    return [prediction_log_pb2.PredictionLog.FromString(r.numpy()).predict_log.request
            for r in tf.data.TFRecordDataset(str(path))]


def test_the_regression_output_is_the_label_mean_plus_std_times_a_unit_output():
    import tensorflow as tf
    import tf_keras as keras
    from components.heads import ScaledValueHead
    from core.tasks import TASKS
    from models.features import FeatureSpec
    from models.model import build_model

    spec = FeatureSpec("y", ["x"], [])
    model = build_model(spec, {}, ScaledValueHead(TASKS["regression"], mean=100.0, std=20.0),
                        hidden_units=[4], dropout=0.0, learning_rate=0.01)
    unit = keras.Model(model.inputs, model.get_layer("unit_value").output)
    x = {"x_xf": tf.constant([[0.5], [-1.0]])}
    np.testing.assert_allclose(model(x).numpy(), 100.0 + 20.0 * unit(x).numpy(), rtol=1e-6)


@pytest.mark.parametrize("kind", ["binary", "regression"])
def test_outputs_stay_float32_under_mixed_precision(kind):
    import tensorflow as tf
    import tf_keras as keras
    from components.heads import ScaledValueHead, SigmoidHead
    from core.tasks import TASKS
    from models.features import FeatureSpec
    from models.model import build_model

    spec = FeatureSpec("y", ["x"], ["c"])
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        head = (SigmoidHead(TASKS[kind], ["0", "1"], 0.5) if kind == "binary"
                else ScaledValueHead(TASKS[kind]))
        model = build_model(spec, {"c_xf": 3}, head, hidden_units=[4], dropout=0.0,
                            learning_rate=0.01)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.get_layer("dense_0").compute_dtype == "bfloat16"
    assert model.output.dtype == tf.float32 and model.output.shape[-1] == 1


def binary_head(output, task):
    from components import heads
    from models.features import FeatureSpec

    custom = task_config(task)
    return heads.fitted(custom["task"], output, FeatureSpec.from_custom_config(custom), None)


def test_a_binary_label_is_1_for_the_positive_class(binary):
    rows, output = binary
    assert [r["species_xf"] for r in rows] == [0, 0, 1, 1]  # Adelie, Adelie, Gentoo, Gentoo
    head = binary_head(output, {"kind": "binary", "positive_class": "Gentoo"})
    assert (head.class_names, head.decision_threshold) == (["Adelie", "Gentoo"], 0.5)


def test_a_binary_model_answers_the_positive_probability_and_the_class_at_the_threshold(
        binary, tmp_path):
    import tensorflow as tf
    from models.features import FeatureSpec, as_model_inputs

    rows, output = binary
    half = task_config({"kind": "binary", "positive_class": "Gentoo", "decision_threshold": 0.5})
    session = exported(tmp_path / "half", fitted(rows, output, half, epochs=60), output, half)
    examples = [e.SerializeToString() for e in raw_examples(TWO_SPECIES)]
    answer = session.run("serving_default", {"examples": examples})
    assert set(answer) == {"probability", "class_name"}
    assert answer["probability"].dtype == np.float32
    assert answer["probability"].shape == (4,)
    assert [c.decode() for c in answer["class_name"]] == [
        "Gentoo" if p >= 0.5 else "Adelie" for p in answer["probability"]]
    assert answer["probability"][2] > 0.5 > answer["probability"][0]  # a Gentoo, an Adelie
    # Another threshold: between the two highest probabilities of a less trained model, so that
    # one row answers positive where 0.5 would make it two or none.
    model, _ = fitted(rows, output, half, epochs=3)
    probabilities = np.sort(model(as_model_inputs(
        {k: tf.constant([r[k] for r in rows]) for k in rows[0]},
        FeatureSpec.from_custom_config(half))).numpy().ravel())
    assert probabilities[-2] < probabilities[-1]
    threshold = float(probabilities[-2] + probabilities[-1]) / 2
    strict = task_config({"kind": "binary", "positive_class": "Gentoo",
                          "decision_threshold": threshold})
    head = binary_head(output, strict["task"])
    answer = exported(tmp_path / "strict", (model, head), output, strict).run(
        "serving_default", {"examples": examples})
    names = [c.decode() for c in answer["class_name"]]
    assert names == ["Gentoo" if p >= threshold else "Adelie" for p in answer["probability"]]
    assert names.count("Gentoo") == 1, (names, answer["probability"], threshold)


def test_a_binary_task_refuses_labels_that_are_not_two_values_with_the_positive_one(binary,
                                                                                    transformed):
    from components.heads import LabelError

    _, two = binary
    _, three = transformed  # ROWS: three species
    with pytest.raises(LabelError, match=r"'Chinstrap'.*exactly two"):
        binary_head(three, {"kind": "binary", "positive_class": "Gentoo"})
    with pytest.raises(LabelError, match=r"task.positive_class is 'gentoo'.*quote it as it is "
                                         r"written"):
        binary_head(two, {"kind": "binary", "positive_class": "gentoo"})
