"""TFMA's Keras-metric combiner, with the inputs of a plain example prepared directly.

TFMA 0.47.1 feeds its Keras metrics (tf_metric_wrapper._CompilableMetricsCombiner) one example
and slice at a time, and for each it calls metric_util.to_label_prediction_example_weight: a
general function (model, output, label and prediction keys, label vocabularies, sparse labels,
sub keys, class and example weights, flattening) that took a third of our Evaluator (75,100 eval
examples, three slices, bench/evaluator.py: 25.9 s with it, 18.7 s with this module; 47.4 and
27.6 s with a baseline model). For a combiner with one
unnamed output and no sub key, aggregation, class weights or example weights, and an example
whose label is a numeric array and whose prediction is an array (or a dict holding one under the
prediction key), that function returns the label and prediction as they are (a scalar as shape
(1,), squeezed as TFMA squeezes) and the weight [1.0] as float32. PlainInputsCombiner computes
exactly that, step for step after TFMA 0.47.1's metrics/metric_util.py (each step names the
function it follows), and hands every other combiner and example to TFMA's function; batching and
metric updates stay TFMA's own code. tfma_patches.py puts it in TFMA's place, on that TFMA only;
tests/components/test_keras_metric_inputs.py holds both paths to the same accumulated inputs.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_util, tf_metric_wrapper

# metric_util.prepare_labels_and_predictions: the keys tried in this order when the model spec
# names no prediction key.
DEFAULT_PREDICTION_KEYS = (tf.saved_model.CLASSIFY_OUTPUT_SCORES, tf.saved_model.REGRESS_OUTPUTS,
                           metric_util._PREDICTIONS, metric_util._LOGISTIC,  # noqa: SLF001
                           metric_util._PROBABILITIES, metric_util._LOGITS)  # noqa: SLF001
# Label dtypes that metric_util maps through a vocabulary (and one-hot for unknown values).
_STRING_KINDS = ("U", "S", "O")


def _spec_keys(eval_config: Optional[tfma.EvalConfig], model_name: str) -> Tuple[str, str]:
    """(prediction_key, label_key) of the model, found as to_label_prediction_example_weight
    finds them: a single model spec answers to the name ''."""
    for spec in (eval_config.model_specs if eval_config else []):
        name = spec.name if len(eval_config.model_specs) > 1 else ""
        if name == model_name:
            return spec.prediction_key, spec.label_key
    return "", ""


def _optional_lookup(value: Any, key: str) -> Any:
    """metric_util's optionally_get_by_keys(value, [key]) where util.get_by_keys is a plain
    lookup: a dict's value under key (an empty dict there counts as not found), else the value
    itself; None (not plain, as a None label is) where get_by_keys would look at '/'-prefixed
    keys instead."""
    if not isinstance(value, Mapping):
        return value
    if key in value:
        found = value[key]
        return value if isinstance(found, Mapping) and not found else found
    if any(not isinstance(k, str) or k.startswith(key + "/") for k in value):
        return None
    return value


def plain_inputs(element, model_name: str, prediction_key: str,
                 label_key: str) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """to_label_prediction_example_weight's one result for an unweighted, unflattened, single
    unnamed output without sub key or class weights; None where the example is not plain."""
    label, prediction = element.label, element.prediction
    if label_key:
        label = _optional_lookup(label, label_key)
    if model_name:
        # util.get_by_keys(prediction, [model_name]), which raises when it is missing.
        if not isinstance(prediction, Mapping) or model_name not in prediction:
            return None
        prediction = prediction[model_name]
        label = _optional_lookup(label, model_name)
    # A dict label left raises; a text label goes through a vocabulary: not plain.
    if not isinstance(label, np.ndarray) or label.dtype.kind in _STRING_KINDS:
        return None
    if isinstance(prediction, Mapping):  # prepare_labels_and_predictions
        if prediction_key:
            prediction = prediction[prediction_key] if prediction_key in prediction else None
        else:
            prediction = next((prediction[k] for k in DEFAULT_PREDICTION_KEYS if k in prediction),
                              None)
    if not isinstance(prediction, np.ndarray):  # a dict left (raises), None, a list, a tensor
        return None
    # "For consistency, make sure all outputs are arrays", then yield_results' _squeeze; the
    # weight: np.array(1.0, float32) when not example_weighted, reshaped to (1,).
    if not label.shape:
        label = label.reshape((1,))
    if not prediction.shape:
        prediction = prediction.reshape((1,))
    return (metric_util._squeeze(label), metric_util._squeeze(prediction),  # noqa: SLF001
            np.array([1.0], dtype=np.float32))


class PlainInputsCombiner(tf_metric_wrapper._CompilableMetricsCombiner):  # noqa: SLF001
    """TFMA's combiner; a plain example's inputs are prepared by plain_inputs."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._plain = (self._output_names == [""] and self._sub_key is None
                       and self._aggregation_type is None and not self._class_weights
                       and not self._example_weighted)
        self._prediction_key, self._label_key = _spec_keys(self._eval_config, self._model_name)

    def add_input(self, accumulator, element):
        inputs = (plain_inputs(element, self._model_name, self._prediction_key, self._label_key)
                  if self._plain else None)
        if inputs is None:
            return super().add_input(accumulator, element)
        accumulator.add_input(0, *inputs)  # what super().add_input does with the one result
        if accumulator.should_flush():
            self._process_batch(accumulator)
        return accumulator

