"""The Evaluator's metrics: the thresholds' metrics, the example count, and the model's loss."""
from __future__ import annotations

import json

import numpy as np

from core.config import DEFAULT_CONFIG, load_config
from tests.helpers import example_config


def test_the_loss_is_declared_as_the_models_own_and_tfma_defaults_are_off():
    # TFMA's defaults would run model.evaluate a second time per batch for the same numbers.
    import tensorflow_model_analysis as tfma
    import tf_keras as keras
    from components.evaluator.eval_config import build_eval_config
    from components.heads import SoftmaxHead
    from core.tasks import TASKS
    from models.features import FeatureSpec
    from models.model import build_model

    config = load_config(DEFAULT_CONFIG)
    eval_config = build_eval_config(config)
    assert eval_config.options.include_default_metrics.value is False
    configs = {m.class_name: m for m in eval_config.metrics_specs[0].metrics}
    loss_class = TASKS[config.task.kind].loss
    assert {"SparseCategoricalAccuracy", "ExampleCount", loss_class} <= set(configs)
    loss = tfma.metrics.metric_specs.metric_instance(configs[loss_class])
    assert loss.name == "loss"  # the name the summary and reports have always shown

    # The same function as the loss the model is compiled with, on the same numbers.
    spec = FeatureSpec("kind", ["length"], ["site"])
    model = build_model(spec, {"site_xf": 4}, SoftmaxHead(TASKS["multiclass"], ["a", "b", "c"]),
                        hidden_units=[4], dropout=0.0, learning_rate=0.01)
    labels = np.array([0, 2, 1, 2])
    probabilities = np.array([[.7, .2, .1], [.1, .1, .8], [.3, .4, .3], [.5, .25, .25]],
                             dtype="float32")
    loss.update_state(labels, probabilities)
    np.testing.assert_allclose(loss.result().numpy(),
                               model.loss(labels, probabilities).numpy(), rtol=1e-6)
    assert isinstance(model.loss, getattr(keras.losses, loss_class))


FEATURES = example_config().features
TASKS = {
    "binary": {"task": {"kind": "binary", "positive_class": "yes", "decision_threshold": 0.7},
               "evaluation.thresholds": {"AUC": {"lower_bound": 0.7, "max_decrease": 0.02}}},
    # The example's first numeric column as the label.
    "regression": {"task.kind": "regression", "features.label": FEATURES.numeric[0],
                   "features.numeric": FEATURES.numeric[1:],
                   "features.categorical": [*FEATURES.categorical, FEATURES.label],
                   "evaluation.thresholds": {"MeanAbsoluteError": {"upper_bound": 7.0,
                                                                   "max_increase": 0.5}}},
}


def task_eval_config(tmp_path, kind):
    from components.evaluator.eval_config import build_eval_config
    from tests.helpers import write_config

    return build_eval_config(load_config(write_config(tmp_path, TASKS[kind])))


def test_each_task_reads_its_prediction_with_its_loss_and_default_metrics(tmp_path):
    import tensorflow_model_analysis as tfma
    import tf_keras as keras
    from components.heads import ScaledValueHead, SigmoidHead
    from core.tasks import TASKS
    from models.features import FeatureSpec
    from models.model import build_model

    binary = task_eval_config(tmp_path / "b", "binary")
    assert {s.prediction_key for s in binary.model_specs} == {"probability"}
    metrics = {m.class_name: tfma.metrics.metric_specs.metric_instance(m)
               for m in binary.metrics_specs[0].metrics}
    assert set(metrics) == {"AUC", "Precision", "Recall", "BinaryAccuracy", "ExampleCount",
                            "BinaryCrossentropy"}
    # Positives are counted at the decision threshold, not Keras' default 0.5.
    for name in ("Precision", "Recall", "BinaryAccuracy"):
        assert metrics[name].get_config()["thresholds"] == 0.7, name

    regression = task_eval_config(tmp_path / "r", "regression")
    assert {s.prediction_key for s in regression.model_specs} == {"value"}
    assert {s.label_key for s in regression.model_specs} == {f"{FEATURES.numeric[0]}_xf"}
    assert {m.class_name for m in regression.metrics_specs[0].metrics} == {
        "MeanAbsoluteError", "RootMeanSquaredError", "ExampleCount", "MeanSquaredError"}

    # Each loss is the one the model is compiled with.
    for head, eval_config in ((SigmoidHead(TASKS["binary"], ["0", "1"], 0.5), binary),
                              (ScaledValueHead(TASKS["regression"]), regression)):
        [loss] = [m for m in eval_config.metrics_specs[0].metrics
                  if m.class_name == head.task.loss]
        assert tfma.metrics.metric_specs.metric_instance(loss).name == "loss"
        model = build_model(FeatureSpec("y", ["x"], []), {}, head, hidden_units=[4],
                            dropout=0.0, learning_rate=0.01)
        assert isinstance(model.loss, getattr(keras.losses, head.task.loss))


def _gate(eval_config, labels, candidate, baseline):
    """TFMA's own validation of the thresholds, on metrics computed by the eval config's metric
    instances from labels and each model's predictions: what the Evaluator blesses with."""
    import tf_keras as keras
    from components.evaluator.eval_config import BASELINE, CANDIDATE
    from tensorflow_model_analysis.evaluators import metrics_validator
    from tensorflow_model_analysis.metrics import metric_specs
    from tensorflow_model_analysis.utils import config_util

    def computed(predictions):
        # The Keras metric of each class name with the config's arguments (TFMA's own classes
        # of these names compute the same numbers in a Beam combiner).
        values = {}
        for config in eval_config.metrics_specs[0].metrics:
            if config.class_name == "ExampleCount":
                continue
            kwargs = {"name": metric_specs.metric_instance(config).name,  # as TFMA names it
                      **json.loads("{" + config.config + "}")}
            metric = getattr(keras.metrics, config.class_name, None)
            metric = metric(**kwargs) if metric else keras.metrics.MeanMetricWrapper(
                getattr(keras.losses, config.class_name)(), **kwargs)
            metric.update_state(labels, predictions)
            values[metric.name] = float(metric.result().numpy())
        return values

    values = {CANDIDATE: computed(candidate), BASELINE: computed(baseline)}
    # What TFMA's run does first: the metrics specs name the models.
    eval_config = config_util.update_eval_config_with_defaults(eval_config, has_baseline=True)
    metrics = {}
    for key in metric_specs.metric_thresholds_from_metrics_specs(eval_config.metrics_specs,
                                                                 eval_config=eval_config):
        model = values[key.model_name]
        metrics[key] = (model[key.name] - values[BASELINE][key.name]) if key.is_diff \
            else model[key.name]
    result = metrics_validator.validate_metrics(((), metrics), eval_config)
    return result.validation_ok, {f.metric_key.name + (" change" if f.metric_key.is_diff else "")
                                  for s in result.metric_validations_per_slice
                                  for f in s.failures}


def test_the_gate_refuses_a_worse_binary_model(tmp_path):
    eval_config = task_eval_config(tmp_path, "binary")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400).astype("float32")
    good = 1 / (1 + np.exp(-(3 * (2 * labels - 1) + rng.normal(0, 2, 400))))
    slightly_worse = 1 / (1 + np.exp(-(2 * (2 * labels - 1) + rng.normal(0, 2, 400))))
    chance = rng.random(400)
    assert _gate(eval_config, labels, good, good) == (True, set())
    # Still above the floor, but more than max_decrease below what serves.
    assert _gate(eval_config, labels, slightly_worse, good) == (False, {"auc change"})
    assert _gate(eval_config, labels, chance, chance) == (False, {"auc"})  # first push


def test_the_gate_refuses_a_worse_regression_model(tmp_path):
    eval_config = task_eval_config(tmp_path, "regression")
    rng = np.random.default_rng(0)
    labels = rng.normal(50, 10, 400).astype("float32")
    good = labels + rng.normal(0, 2, 400)
    biased = good + 3.0  # MAE up from ~1.6 to ~3.2: under the bound, over max_increase 0.5
    median = np.full(400, np.median(labels))  # MAE ~8: over the upper bound 7
    assert _gate(eval_config, labels, good, good) == (True, set())
    assert _gate(eval_config, labels, biased, good) == (False, {"mean_absolute_error change"})
    assert _gate(eval_config, labels, median, median) == (False, {"mean_absolute_error"})
