"""The run report as artifacts of a Kubeflow run, which the KFP v2 UI renders.

The last step of the compiled pipeline (pipeline/kubeflow/compiler.py adds it; a local run writes
its report from the CLI instead). Its outputs are typed so that the UI's viewers pick them up
(frontend/src/components/viewers/MetricsVisualizations.tsx at KFP 2.3.0): `html` (system.HTML,
one HTML file AT the artifact's URI, which the UI reads and shows), `markdown` (system.Markdown,
likewise) and `metrics` (system.Metrics: its numeric custom properties are the scalar metrics).
TFX's compiler cannot write system.* types; pipeline/kubeflow/spec.py retitles these three
outputs, and pipeline/kubeflow/entrypoint.py maps them back to the classes below in the pod (one
table of the three: core/nodes.py REPORT_OUTPUTS).

The step reads its inputs with the run report's one reader (reader.from_outputs) and writes what
render.py and headline_metrics make of the facts.
"""
import json
import os

import tensorflow as tf
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact, standard_artifacts

from components.release.component import ReleaseStatus
from components.run_report.facts import RunFacts
from core import nodes
from core import storage
from core.nodes import REPORT_OUTPUTS


class HtmlReport(artifact.Artifact):
    TYPE_NAME = REPORT_OUTPUTS["html"].tfx_type


class MarkdownReport(artifact.Artifact):
    TYPE_NAME = REPORT_OUTPUTS["markdown"].tfx_type


class MetricsReport(artifact.Artifact):
    TYPE_NAME = REPORT_OUTPUTS["metrics"].tfx_type


def headline_metrics(facts: RunFacts) -> dict:
    """The scalars the UI shows: the overall metrics of the candidate, the decision, drift,
    retrieval's hit rates (a recommender's)."""
    metrics = {f"{name}": float(values["candidate"]) for name, values in facts.metrics.items()
               if values.get("candidate") is not None}
    metrics["blessed"] = float(facts.blessed is True)
    metrics["pushed"] = float(bool(facts.pushed_to))
    if facts.release is not None:
        metrics["released"] = float(facts.release.get("action") == "released")
    drift = facts.drift or {"features": []}
    metrics["drifted_features"] = float(sum(f["drifted"] for f in drift["features"]))
    if facts.retrieval is not None and facts.retrieval.clicked_examples:
        k = facts.retrieval.k
        metrics[f"retrieval_hit_rate_at_{k}"] = facts.retrieval.hit_rate
        metrics[f"retrieval_popular_hit_rate_at_{k}"] = facts.retrieval.popular_hit_rate
    for split in ("train", "eval"):
        counts = [s[split].count for s in facts.features.values() if split in s]
        if counts:
            metrics[f"rows_{split}"] = float(counts[0])
    return metrics


def _write(uri: str, text: str) -> None:
    # None on an object store (no folder markers).
    storage.makedirs(os.path.dirname(uri), tf.io.gfile.makedirs)
    if tf.io.gfile.isdir(uri):  # a runner that made the output a folder: the file replaces it
        tf.io.gfile.rmtree(uri)
    with tf.io.gfile.GFile(uri, "w") as f:
        f.write(text)


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
        release: InputArtifact[ReleaseStatus] = None) -> None:
    """`config` is the pipeline's config as JSON, its paths the cluster's; `input_base` where the
    data is, as this step sees it; `release` the release step's status (serving.release: canary
    only)."""
    from components.run_report import reader, render
    from components.run_report.kfp_paths import run_id_from_uri
    from core.config import PipelineConfig

    settings = PipelineConfig.model_validate(json.loads(config))
    outputs = {nodes.EXAMPLES: examples, nodes.STATISTICS: statistics,
               nodes.ANOMALIES: anomalies, nodes.DRIFT: drift,
               nodes.MODEL_RUN: model_run, nodes.BASELINE: baseline,
               nodes.EVALUATION: evaluation, nodes.BLESSING: blessing,
               nodes.PUSHED_MODEL: pushed_model,
               **({nodes.RELEASE_STATUS: release} if release is not None else {})}
    run_id = run_id_from_uri(html.uri, settings.pipeline_name, nodes.RUN_REPORT, "html")
    facts = reader.from_outputs({k: a.mlmd_artifact for k, a in outputs.items()}, settings,
                                run_id, input_base=input_base)
    _write(html.uri, render.html(facts))
    _write(markdown.uri, render.markdown(facts))
    for name, value in headline_metrics(facts).items():
        metrics.set_float_custom_property(name, value)
