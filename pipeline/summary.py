"""What a run did, read back from the metadata store: the summary printed at the end of a run."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from core import nodes
from core.config import BASELINE, CANDIDATE


@dataclasses.dataclass
class RunSummary:
    run_id: str
    ran: List[str]
    cached: List[str]
    metrics: Dict[str, Dict[str, float]]  # metric -> {candidate: x, baseline: y}
    baseline_version: Optional[str]
    blessed: Optional[bool]
    failures: List[str]
    pushed_path: Optional[str]
    pushed_now: bool
    evaluation_uri: Optional[str] = None
    pictures: List[str] = dataclasses.field(default_factory=list)
    # The version TF Serving serves at the end of the run (None: nothing serves).
    serving_now: Optional[str] = None

    def format(self) -> str:
        lines = [f"Summary of run {self.run_id}",
                 f"  ran:        {', '.join(self.ran) or '-'}",
                 f"  from cache: {', '.join(self.cached) or '-'}"]
        if nodes.EXAMPLE_GEN in self.cached:  # its cache key holds the newest span's fingerprint
            lines.append("  data:       no new span since the last run")
        if self.metrics:
            baseline = "baseline" + (f" v{self.baseline_version}" if self.baseline_version
                                     else "")
            lines.append(f"  {'metric (all eval data)':32} {'candidate':>10} {baseline:>18}")
            for name, values in sorted(self.metrics.items()):
                base = values.get(BASELINE)
                lines.append(f"  {name:32} {values.get(CANDIDATE, float('nan')):>10.4f} "
                             f"{'-' if base is None else f'{base:.4f}':>18}")
        if self.baseline_version is None and self.blessed is not None:
            if self.serving_now is None or nodes.SERVING_BASELINE in self.ran:
                lines.append("  baseline:   none serving yet; absolute thresholds only")
            else:  # an evaluation reused from the cache, made before anything served
                lines.append("  baseline:   none when this model was evaluated (absolute "
                             "thresholds only; reused from the cache); "
                             f"v{self.serving_now} serves now")
        blessed = "-" if self.blessed is None else "yes" if self.blessed else "no"
        lines.append(f"  blessed:    {blessed}")
        for failure in self.failures:
            lines.append(f"    - {failure}")
        if self.pushed_path and self.pushed_now:
            lines.append(f"  pushed:     {self.pushed_path}")
        elif self.pushed_path:
            lines.append(f"  pushed:     nothing new (unchanged inputs; serving {self.pushed_path} "
                         "from an earlier run)")
        elif self.blessed is False:
            lines.append("  pushed:     nothing: the model was not blessed; serving is untouched")
        else:
            lines.append("  pushed:     nothing")
        for picture in self.pictures:
            lines.append(f"  picture:    {picture}")
        return "\n".join(lines)


def latest_run(store) -> metadata_store_pb2.Context:
    runs = store.get_contexts_by_type("pipeline_run")
    if not runs:
        raise LookupError("the metadata store holds no pipeline run")
    return max(runs, key=lambda c: (c.create_time_since_epoch, c.id))


def run_outputs(store, run: metadata_store_pb2.Context
                ) -> Dict[Tuple[str, str], metadata_store_pb2.Artifact]:
    """(node id, output key) -> artifact, for every execution of the run."""
    executions = store.get_executions_by_context(run.id)
    node_of = {}
    for execution in executions:
        for context in store.get_contexts_by_execution(execution.id):
            if context.type == "node":  # named "<pipeline>.<node id>"
                node_of[execution.id] = context.name.split(".")[-1]
    events = store.get_events_by_execution_ids([e.id for e in executions])
    outputs = [e for e in events if e.type == metadata_store_pb2.Event.OUTPUT]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in outputs])}
    return {(node_of.get(e.execution_id, "?"), e.path.steps[0].key): artifacts[e.artifact_id]
            for e in outputs if e.path.steps}


def _custom(artifact, key):
    value = artifact.custom_properties.get(key)
    if value is None:
        return None
    return value.int_value if value.HasField("int_value") else value.string_value


def failure_lines(result) -> List[str]:
    """One line per failed threshold of a TFMA ValidationResult, naming the slice it failed on."""
    from tensorflow_model_analysis.slicer import slicer_lib

    failures = []
    for per_slice in result.metric_validations_per_slice:
        slice_name = slicer_lib.stringify_slice_key(
            slicer_lib.deserialize_slice_key(per_slice.slice_key))
        for failure in per_slice.failures:
            failures.append(f"{failure.metric_key.name}"
                            f"{' (change vs baseline)' if failure.metric_key.is_diff else ''}"
                            f" on {slice_name}"
                            f" = {failure.metric_value.double_value.value:.4f} fails "
                            f"{failure.metric_threshold}".replace("\n", " ").strip())
    return failures


def _failures(evaluation_uri: str) -> List[str]:
    import tensorflow_model_analysis as tfma

    return failure_lines(tfma.load_validation_result(evaluation_uri))


def _pictures(outputs, report_dir: Path, by_slice, baseline_version) -> List[str]:
    from pipeline import report

    report_dir.mkdir(parents=True, exist_ok=True)
    pictures = []
    statistics = outputs.get(nodes.STATISTICS)
    if statistics is not None:
        splits = json.loads(statistics.properties["split_names"].string_value)
        pictures.append(report.plot_statistics(statistics.uri, splits, report_dir / "data.png"))
    metric = next((m for m in by_slice.get("all", {}) if m not in ("example_count", "loss")),
                  None)
    if metric is not None:
        pictures.append(report.plot_evaluation(by_slice, metric, report_dir / "evaluation.png",
                                               baseline_version))
    return [str(p) for p in pictures]


def summarize(metadata_path: str, ran: List[str], cached: List[str],
              report_dir: Optional[Path] = None,
              model_base_path: Optional[str] = None) -> RunSummary:
    """The run's summary; with report_dir, also its pictures (data and evaluation); with
    model_base_path, what serves now (a cached evaluation may predate it)."""
    from components.serving_baseline.component import latest_version
    from pipeline.report import metrics_by_slice
    from tfx.orchestration import metadata

    store = metadata_store.MetadataStore(
        metadata.sqlite_metadata_connection_config(metadata_path))
    run = latest_run(store)
    outputs = run_outputs(store, run)
    evaluation = outputs.get(nodes.EVALUATION)
    blessing = outputs.get(nodes.BLESSING)
    baseline = outputs.get(nodes.BASELINE)
    pushed = outputs.get(nodes.PUSHED_MODEL)
    blessed = None if blessing is None else bool(_custom(blessing, "blessed"))
    by_slice = metrics_by_slice(evaluation.uri) if evaluation else {}
    baseline_version = (_custom(baseline, "serving_version") or None) if baseline else None
    return RunSummary(
        run_id=run.name, ran=ran, cached=cached,
        metrics=by_slice.get("all", {}),
        baseline_version=baseline_version,
        blessed=blessed,
        failures=_failures(evaluation.uri) if evaluation and blessed is False else [],
        pushed_path=(_custom(pushed, "pushed_destination") or None)
        if pushed and _custom(pushed, "pushed") else None,
        pushed_now=bool(pushed) and nodes.PUSHER in ran,
        evaluation_uri=evaluation.uri if evaluation else None,
        pictures=_pictures(outputs, report_dir, by_slice, baseline_version) if report_dir else [],
        serving_now=latest_version(model_base_path) if model_base_path else None)


def latest_output_uri(metadata_path: str, node_id: str, key: str) -> str:
    """The URI of a node's output in the newest run, e.g. SchemaGen's schema."""
    from tfx.orchestration import metadata

    store = metadata_store.MetadataStore(
        metadata.sqlite_metadata_connection_config(metadata_path))
    artifact = run_outputs(store, latest_run(store)).get((node_id, key))
    if artifact is None:
        raise LookupError(f"the newest run has no output '{key}' of {node_id}")
    return artifact.uri
