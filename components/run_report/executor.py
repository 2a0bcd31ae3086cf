"""What the RunReport step runs (its executor: components/function_executor.py says why it is
apart from component.py, which says what it does), and the classes of its outputs."""
import json
import os
import time

import tensorflow as tf
from tfx.types import artifact

from components.function_executor import FunctionExecutor
from components.run_report.facts import RunFacts, skew_compared, skew_ratio
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
    serving skew (when the run compared a serving span), retrieval's hit rates (a
    recommender's)."""
    metrics = {f"{name}": float(values["candidate"]) for name, values in facts.metrics.items()
               if values.get("candidate") is not None}
    metrics["blessed"] = float(facts.blessed is True)
    metrics["pushed"] = float(bool(facts.pushed_to))
    if facts.release is not None:
        metrics["released"] = float(facts.release.get("action") == "released")
    drift = facts.drift or {"features": []}
    metrics["drifted_features"] = float(sum(f["drifted"] for f in drift["features"]))
    if skew_compared(facts.skew):
        skew = facts.skew
        metrics["skewed_features"] = float(sum(f["skewed"] for f in skew["features"]))
        metrics["missing_serving_features"] = float(len(skew["missing"]))
        metrics["unseen_serving_values"] = float(sum(u["count"] for u in skew["unseen"]))
        measured = [skew_ratio(f) for f in skew["features"] if skew_ratio(f) is not None]
        if measured:
            metrics["worst_skew_ratio"] = max(measured)
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


def run_report(examples, statistics, anomalies, drift, model_run, baseline, evaluation, blessing,
               pushed_model, html, markdown, metrics, config: str, input_base: str,
               release=None, skew=None) -> None:
    """`config` is the pipeline's config as JSON, its paths the cluster's; `input_base` where the
    data is, as this step sees it; `release` the release step's status (serving.release: canary
    only); `skew` the SkewCheck's result (a pipeline that checks a serving span)."""
    from components.run_report import reader, render, skew_textfile
    from components.run_report.kfp_paths import run_id_from_uri
    from core.config import PipelineConfig

    settings = PipelineConfig.model_validate(json.loads(config))
    outputs = {nodes.EXAMPLES: examples, nodes.STATISTICS: statistics,
               nodes.ANOMALIES: anomalies, nodes.DRIFT: drift,
               nodes.MODEL_RUN: model_run, nodes.BASELINE: baseline,
               nodes.EVALUATION: evaluation, nodes.BLESSING: blessing,
               nodes.PUSHED_MODEL: pushed_model,
               **({nodes.RELEASE_STATUS: release} if release is not None else {}),
               **({nodes.SKEW: skew} if skew is not None else {})}
    run_id = run_id_from_uri(html.uri, settings.pipeline_name, nodes.RUN_REPORT, "html")
    facts = reader.from_outputs({k: a.mlmd_artifact for k, a in outputs.items()}, settings,
                                run_id, input_base=input_base)
    _write(html.uri, render.html(facts))
    _write(markdown.uri, render.markdown(facts))
    for name, value in headline_metrics(facts).items():
        metrics.set_float_custom_property(name, value)
    if skew_compared(facts.skew):
        # Beside the report (an object store, often: no atomic local write there), and in the
        # node_exporter textfile directory the config names, if this pod has one.
        now = time.time()  # one time in both files when the check's own is not known
        _write(f"{html.uri.rsplit('/', 1)[0]}/{skew_textfile.TEXTFILE}",
               skew_textfile.text(facts, now))
        if skew_textfile.configured_dir(settings):
            skew_textfile.write(facts, str(skew_textfile.configured_dir(settings)),
                                skew_textfile.collector_name(facts.pipeline), now)


class Executor(FunctionExecutor):
    FUNCTION = staticmethod(run_report)
