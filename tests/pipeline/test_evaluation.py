"""The Evaluator's metrics: the thresholds' metrics, the example count, and the model's loss."""
from __future__ import annotations

import numpy as np
import tensorflow_model_analysis as tfma
import tf_keras as keras

from models.features import FeatureSpec
from models.model import build_model
from pipeline.config import DEFAULT_CONFIG, load_config
from pipeline.evaluation import LOSS, build_eval_config


def test_the_loss_is_declared_as_the_models_own_and_tfma_defaults_are_off():
    # TFMA's defaults would run model.evaluate a second time per batch for the same numbers.
    eval_config = build_eval_config(load_config(DEFAULT_CONFIG))
    assert eval_config.options.include_default_metrics.value is False
    configs = {m.class_name: m for m in eval_config.metrics_specs[0].metrics}
    assert {"SparseCategoricalAccuracy", "ExampleCount", LOSS} <= set(configs)
    loss = tfma.metrics.metric_specs.metric_instance(configs[LOSS])
    assert loss.name == "loss"  # the name the summary and reports have always shown

    # The same function as the loss the model is compiled with, on the same numbers.
    spec = FeatureSpec("kind", ["length"], ["site"])
    model = build_model(spec, {"site_xf": 4}, 3, hidden_units=[4], dropout=0.0,
                        learning_rate=0.01)
    labels = np.array([0, 2, 1, 2])
    probabilities = np.array([[.7, .2, .1], [.1, .1, .8], [.3, .4, .3], [.5, .25, .25]],
                             dtype="float32")
    loss.update_state(labels, probabilities)
    np.testing.assert_allclose(loss.result().numpy(),
                               model.loss(labels, probabilities).numpy(), rtol=1e-6)
    assert isinstance(model.loss, getattr(keras.losses, LOSS))
