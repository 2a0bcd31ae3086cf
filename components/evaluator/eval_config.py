"""The TFMA EvalConfig from the config's task and evaluation thresholds.

Per task kind (core/tasks.py): the prediction TFMA reads (the Task's last output), the model's
loss (Task.loss, the class the head compiles: components/heads.py) and the default metrics
computed beside the thresholds'. A kind with a decision threshold counts positives at it.
"""
from __future__ import annotations

import json
from typing import Dict, Optional

import tensorflow_model_analysis as tfma
from google.protobuf.wrappers_pb2 import BoolValue

from core import tasks
from core.config import BASELINE, CANDIDATE, PipelineConfig, ThresholdConfig
from models.features import transformed_name

# Keras metrics that count a positive at a threshold, and the name of their parameter.
AT_THRESHOLD = {"Precision": "thresholds", "Recall": "thresholds",
                "BinaryAccuracy": "threshold", "TruePositives": "thresholds",
                "FalsePositives": "thresholds", "TrueNegatives": "thresholds",
                "FalseNegatives": "thresholds"}


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


def _metric(name: str, bounds: Optional[ThresholdConfig], slices: str, settings: str
            ) -> tfma.MetricConfig:
    if bounds is None:
        return tfma.MetricConfig(class_name=name, config=settings)
    if slices == "every_slice":  # TFMA applies a slice-less threshold to every slice
        return tfma.MetricConfig(class_name=name, config=settings, threshold=_threshold(bounds))
    # An empty SlicingSpec matches the overall slice only (slicer_lib.is_slice_applicable).
    return tfma.MetricConfig(class_name=name, config=settings,
                             per_slice_thresholds=[tfma.PerSliceMetricThreshold(
                                 slicing_specs=[tfma.SlicingSpec()], threshold=_threshold(bounds))])


def _settings(name: str, config: PipelineConfig) -> str:
    """A metric's keyword arguments, as TFMA's MetricConfig.config takes them (JSON without
    braces): a metric that counts positives does so at the task's decision threshold."""
    threshold = config.task.settings.get("decision_threshold")
    if threshold is not None and name in AT_THRESHOLD:
        return json.dumps({AT_THRESHOLD[name]: threshold})[1:-1]
    return ""


def build_eval_config(config: PipelineConfig) -> tfma.EvalConfig:
    label = transformed_name(config.features.label)
    task = tasks.TASKS[config.task.kind]

    def model_spec(name: str, is_baseline: bool) -> tfma.ModelSpec:
        # transform_features turns the raw label into what the model predicts (the head's
        # label encoding: the class id, 1 or 0, the number).
        return tfma.ModelSpec(name=name, is_baseline=is_baseline,
                              signature_name="serving_default",
                              prediction_key=task.outputs[-1], label_key=label,
                              preprocessing_function_names=["transform_features"])

    # Metric names were checked when the config was loaded (EvaluationConfig, and that they fit
    # the task: PipelineConfig); the task's defaults join them, without thresholds.
    thresholds: Dict[str, Optional[ThresholdConfig]] = {
        **{name: None for name in task.default_metrics}, **config.evaluation.thresholds}
    metrics = [_metric(name, bounds, config.evaluation.threshold_slices, _settings(name, config))
               for name, bounds in thresholds.items()]
    if "ExampleCount" not in thresholds:
        metrics.append(tfma.MetricConfig(class_name="ExampleCount"))
    # The model's compiled loss, declared rather than taken from TFMA's defaults
    # (include_default_metrics): the defaults re-run the model per batch through model.evaluate,
    # for metrics the list above computes anyway, and load the model once per combiner instance;
    # on 256k eval examples that was ~40% of the Evaluator. Declared, the loss joins the other
    # Keras metrics in one pass over labels and predictions, under the same name and value (the
    # model has no regularization losses; models/model.py).
    if "loss" not in {m.class_name for m in metrics}:
        metrics.append(tfma.MetricConfig(class_name=task.loss, config='"name": "loss"'))
    return tfma.EvalConfig(
        model_specs=[model_spec(CANDIDATE, False), model_spec(BASELINE, True)],
        slicing_specs=[tfma.SlicingSpec()] + [tfma.SlicingSpec(feature_keys=[feature])
                                              for feature in config.features.categorical],
        metrics_specs=[tfma.MetricsSpec(metrics=metrics)],
        options=tfma.Options(include_default_metrics=BoolValue(value=False)))
