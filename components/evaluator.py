"""TFX's Evaluator, told to evaluate without a baseline when nothing serves yet.

ServingBaseline always emits an artifact (KFP needs one); when it marks it empty, this executor
drops it, and TFX then ignores the change thresholds, as it does for a first model.
"""
from __future__ import annotations

from tfx.components.evaluator import component as evaluator_component
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import executor_spec

from components.serving_baseline import HAS_BASELINE


class Executor(evaluator_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802
        baselines = [b for b in input_dict.get("baseline_model", [])
                     if b.get_int_custom_property(HAS_BASELINE)]
        return super().Do({**input_dict, "baseline_model": baselines}, output_dict,
                          exec_properties)


class Evaluator(evaluator_component.Evaluator):
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
