"""The run report as artifacts of a Kubeflow run, which the KFP v2 UI renders.

The last step of the compiled pipeline (pipeline/kubeflow/client/compiler.py adds it; a local run
writes its report from the CLI instead). Its outputs are typed so that the UI's viewers pick them up
(frontend/src/components/viewers/MetricsVisualizations.tsx at KFP 2.3.0): `html` (system.HTML,
one HTML file AT the artifact's URI, which the UI reads and shows), `markdown` (system.Markdown,
likewise) and `metrics` (system.Metrics: its numeric custom properties are the scalar metrics).
TFX's compiler cannot write system.* types; pipeline/kubeflow/client/spec.py retitles these three
outputs, and pipeline/kubeflow/step/entrypoint.py maps them back to the classes below in the pod
(one table of the three: core/nodes.py REPORT_OUTPUTS).

The step reads its inputs with the run report's one reader (reader.from_outputs) and writes what
render.py and headline_metrics make of the facts.
"""
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from components.release.executor import ReleaseStatus
from components.run_report.executor import (  # noqa: F401  (where callers find them)
    Executor, HtmlReport, MarkdownReport, MetricsReport, headline_metrics, run_report)


@component
def RunReport(  # noqa: N802 (a TFX component is named like a class)
        examples: InputArtifact[standard_artifacts.Examples],
        statistics: InputArtifact[standard_artifacts.ExampleStatistics],
        anomalies: InputArtifact[standard_artifacts.ExampleAnomalies],
        drift: InputArtifact[standard_artifacts.ExampleAnomalies],
        model_run: InputArtifact[standard_artifacts.ModelRun],
        baseline: InputArtifact[standard_artifacts.Model],
        evaluation: InputArtifact[standard_artifacts.ModelEvaluation],
        blessing: InputArtifact[standard_artifacts.ModelBlessing],
        pushed_model: InputArtifact[standard_artifacts.PushedModel],
        html: OutputArtifact[HtmlReport],
        markdown: OutputArtifact[MarkdownReport],
        metrics: OutputArtifact[MetricsReport],
        config: Parameter[str],
        input_base: Parameter[str],
        release: InputArtifact[ReleaseStatus] = None,
        skew: InputArtifact[standard_artifacts.ExampleAnomalies] = None) -> None:
    """`config` is the pipeline's config as JSON, its paths the cluster's; `input_base` where the
    data is, as this step sees it; `release` the release step's status (serving.release: canary
    only); `skew` the SkewCheck's result (a pipeline that checks a serving span)."""
    run_report(examples, statistics, anomalies, drift, model_run, baseline, evaluation, blessing,
               pushed_model, html, markdown, metrics, config, input_base, release, skew)


# The step runs this: the same call without TFX's @component machinery (Beam).
RunReport.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
