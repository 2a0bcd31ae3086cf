"""TFX's Evaluator, told to evaluate without a baseline when nothing serves yet, with TFMA's
per-example stages made cheaper.

ServingBaseline always emits an artifact (KFP needs one); when it marks it empty, this executor
drops it, and TFX then ignores the change thresholds, as it does for a first model.

TFMA computes its metrics per example. On the TFMA they were read against (tfma_patches.py), the
Evaluator replaces TFMA's unbatch and slice-key extractors by one stage that splits only what
the metrics and slices read (unbatch_and_slice.py), prepares a plain example's Keras-metric
inputs directly (keras_metric_inputs.py), builds TFMA's metric preprocessing once rather than per
example (metric_preprocessing.py) and, on the in-memory DirectRunner, drops the hot-key fan-out.
The metrics, slices and thresholds are TFMA's, on the same examples; what remains is mostly
TFMA's per-example combining (bench/README.md). On another TFMA it runs TFMA's own stages.
"""
from __future__ import annotations

import contextlib
from unittest import mock

import tensorflow_model_analysis as tfma
from tfx.components.evaluator import component as evaluator_component
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import executor_spec

from components import keras2
from components.evaluator import tfma_patches, unbatch_and_slice
from components.serving_baseline.component import HAS_BASELINE


class Executor(evaluator_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802
        baselines = [b for b in input_dict.get("baseline_model", [])
                     if b.get_int_custom_property(HAS_BASELINE)]
        # A pipeline made by the runner's own function may run anywhere: TFMA's fan-out stays.
        one_worker = (self._make_beam_pipeline_fn is None
                      and tfma_patches.runs_in_one_worker(self._beam_pipeline_args))
        # TFX builds the model's loader with tfma.default_eval_shared_model (its executor.py);
        # ours loads with tf_keras by name, whatever Keras a Beam worker's tf.keras is.
        default_eval_shared_model = tfma.default_eval_shared_model
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(
                tfma, "default_eval_shared_model",
                lambda *args, **kwargs: keras2.with_tf_keras_loader(
                    default_eval_shared_model(*args, **kwargs))))
            patched = stack.enter_context(tfma_patches.applied(one_worker))
            if patched:
                # TFX's udf_utils imports `custom_extractors` by this dotted name (no module
                # file); one given in exec_properties wins.
                exec_properties = {
                    "custom_extractors": f"{unbatch_and_slice.__name__}.custom_extractors",
                    **exec_properties}
            return super().Do({**input_dict, "baseline_model": baselines}, output_dict,
                              exec_properties)


class Evaluator(evaluator_component.Evaluator):
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
