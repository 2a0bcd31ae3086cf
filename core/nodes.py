"""The pipeline's node ids and the outputs read back from them, named once.

pipeline/builder.py gives every step its id from here; everything that finds a step or its
output later (the summary, the report, the Kubeflow compiler and report step, the Trainer's
properties, `python -m pipeline.schema`) uses these names, never a string of its own. The output
keys are TFX's standard keys (tfx/types/standard_component_specs.py at 1.16.0) and those of our
components' specs; tests/pipeline/test_nodes.py checks both against the built pipeline.
Imports nothing: TensorFlow-free readers (the report, the summary) use it too.
"""
from __future__ import annotations

from typing import NamedTuple, Tuple

EXAMPLE_GEN = "CsvExampleGen"
STATISTICS_GEN = "StatisticsGen"
# One of the two, by config: a reviewed schema file, or one inferred from the statistics.
IMPORT_SCHEMA_GEN = "ImportSchemaGen"
SCHEMA_GEN = "SchemaGen"
EXAMPLE_VALIDATOR = "ExampleValidator"
ANOMALY_GATE = "AnomalyGate"
DRIFT_CHECK = "DriftCheck"
DRIFT_GATE = "DriftGate"
# The newest serving span (logged requests) against the training window (components/skew_gate).
SKEW_CHECK = "SkewCheck"
SKEW_GATE = "SkewGate"
TRANSFORM = "Transform"
TRAINER = "Trainer"
SERVING_BASELINE = "ServingBaseline"
EVALUATOR = "Evaluator"
PUSHER = "Pusher"
# serving.release: canary only: the pushed version to the serving Rollout (components/release).
RELEASE = "Release"
# Kubeflow only: the report as run artifacts for the KFP UI.
RUN_REPORT = "RunReport"
# Kubeflow only: the exit step, after every other whatever their outcome (a failed or stopped
# run's report, the webhook message: pipeline/kubeflow/client/exit_handler.py).
RUN_EXIT = "RunExit"

Output = Tuple[str, str]  # (node id, output key), as ML Metadata records an output

EXAMPLES: Output = (EXAMPLE_GEN, "examples")
STATISTICS: Output = (STATISTICS_GEN, "statistics")
INFERRED_SCHEMA: Output = (SCHEMA_GEN, "schema")
ANOMALIES: Output = (EXAMPLE_VALIDATOR, "anomalies")
DRIFT: Output = (DRIFT_CHECK, "drift")
SKEW: Output = (SKEW_CHECK, "skew")
TRANSFORM_GRAPH: Output = (TRANSFORM, "transform_graph")
MODEL: Output = (TRAINER, "model")
MODEL_RUN: Output = (TRAINER, "model_run")
BASELINE: Output = (SERVING_BASELINE, "baseline")
EVALUATION: Output = (EVALUATOR, "evaluation")
BLESSING: Output = (EVALUATOR, "blessing")
PUSHED_MODEL: Output = (PUSHER, "pushed_model")
RELEASE_STATUS: Output = (RELEASE, "status")



# Our other custom artifact types: the TYPE_NAME each declares (a KFP schema title, as TFX 1.16's
# compiler requires: compiler_utils._SCHEMA_TITLE_RE) -> the class a Kubeflow step's pod imports
# for it (pipeline/kubeflow/step/entrypoint.py restore_custom_classes; TFX imports a custom type by
# its title, which is no import path).
CUSTOM_TYPES = {"release.Status": "components.release.executor.ReleaseStatus"}


class ReportOutput(NamedTuple):
    tfx_type: str  # the TYPE_NAME the component declares (TFX writes it as the schema title)
    kfp_type: str  # the system.* type the KFP UI renders
    tfx_class: str  # the class the step builds (TFX imports a custom type by its title)


# The RunReport step's outputs (components/run_report/component.py), the one table of their types:
# pipeline/kubeflow/client/spec.py retitles each tfx_type to its kfp_type for the UI (the backend
# records the schema title as the MLMD type: launcher_v2.go getArtifactSchema, metadata client.go
# RecordArtifact; the UI lists system.HTML, system.Markdown and system.Metrics:
# frontend/src/components/viewers/MetricsVisualizations.tsx, KFP 2.3.0), and
# pipeline/kubeflow/step/entrypoint.py maps the kfp_type back to the tfx_class in the pod.
REPORT_OUTPUTS = {
    "html": ReportOutput("report.HTML", "system.HTML",
                         "components.run_report.executor.HtmlReport"),
    "markdown": ReportOutput("report.Markdown", "system.Markdown",
                             "components.run_report.executor.MarkdownReport"),
    "metrics": ReportOutput("report.Metrics", "system.Metrics",
                            "components.run_report.executor.MetricsReport"),
}
