"""The TFMA EvalConfig from the config's evaluation thresholds."""
from __future__ import annotations

from typing import Optional

import tensorflow_model_analysis as tfma
from google.protobuf.wrappers_pb2 import BoolValue

from models.features import transformed_name
from pipeline.config import PipelineConfig, ThresholdConfig

CANDIDATE, BASELINE = "candidate", "baseline"
# models/model.py compiles the model with this loss.
LOSS = "SparseCategoricalCrossentropy"


def _threshold(bounds: ThresholdConfig) -> tfma.MetricThreshold:
    threshold = tfma.MetricThreshold()
    if bounds.lower_bound is not None or bounds.upper_bound is not None:
        value = threshold.value_threshold
        if bounds.lower_bound is not None:
            value.lower_bound.value = bounds.lower_bound
        if bounds.upper_bound is not None:
            value.upper_bound.value = bounds.upper_bound
    if bounds.max_decrease is not None:
        threshold.change_threshold.direction = tfma.MetricDirection.HIGHER_IS_BETTER
        threshold.change_threshold.absolute.value = -bounds.max_decrease
    elif bounds.max_increase is not None:
        threshold.change_threshold.direction = tfma.MetricDirection.LOWER_IS_BETTER
        threshold.change_threshold.absolute.value = bounds.max_increase
    return threshold


def metric_problem(class_name: str) -> Optional[str]:
    """Why TFMA cannot compute a metric of that class name, or None when it can."""
    try:
        tfma.metrics.metric_specs.metric_instance(tfma.MetricConfig(class_name=class_name))
    except (TypeError, ValueError, AttributeError) as e:
        return (f"'{class_name}' is not a TFMA or Keras metric class name (e.g. "
                f"SparseCategoricalAccuracy, ExampleCount, AUC): {e}")
    return None


def _metric(name: str, bounds: ThresholdConfig, slices: str) -> tfma.MetricConfig:
    if slices == "every_slice":  # TFMA applies a slice-less threshold to every slice
        return tfma.MetricConfig(class_name=name, threshold=_threshold(bounds))
    # An empty SlicingSpec matches the overall slice only (slicer_lib.is_slice_applicable).
    return tfma.MetricConfig(class_name=name, per_slice_thresholds=[tfma.PerSliceMetricThreshold(
        slicing_specs=[tfma.SlicingSpec()], threshold=_threshold(bounds))])


def build_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
    label = transformed_name(config.features.label)

    def model_spec(name: str, is_baseline: bool) -> tfma.ModelSpec:
        # transform_features turns the raw string label into the id the model predicts.
        return tfma.ModelSpec(name=name, is_baseline=is_baseline,
                              signature_name="serving_default", prediction_key="probabilities",
                              label_key=label, preprocessing_function_names=["transform_features"])

    # Metric names were checked when the config was loaded (EvaluationConfig).
    metrics = [_metric(name, bounds, config.evaluation.threshold_slices)
               for name, bounds in config.evaluation.thresholds.items()]
    if "ExampleCount" not in config.evaluation.thresholds:
        metrics.append(tfma.MetricConfig(class_name="ExampleCount"))
    # The model's compiled loss, declared rather than taken from TFMA's defaults
    # (include_default_metrics): the defaults re-run the model per batch through model.evaluate,
    # for metrics the list above computes anyway, and load the model once per combiner instance;
    # on 256k eval examples that was ~40% of the Evaluator. Declared, the loss joins the other
    # Keras metrics in one pass over labels and predictions, under the same name and value (the
    # model has no regularization losses; models/model.py).
    if "loss" not in {m.class_name for m in metrics}:
        metrics.append(tfma.MetricConfig(class_name=LOSS, config='"name": "loss"'))
    return tfma.EvalConfig(
        model_specs=[model_spec(CANDIDATE, False), model_spec(BASELINE, True)],
        slicing_specs=[tfma.SlicingSpec()] + [tfma.SlicingSpec(feature_keys=[feature])
                                              for feature in config.features.categorical],
        metrics_specs=[tfma.MetricsSpec(metrics=metrics)],
        options=tfma.Options(include_default_metrics=BoolValue(value=False)))
