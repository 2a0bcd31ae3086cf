"""Gathers one run's report content from ML Metadata, its artifacts and the config."""
from __future__ import annotations

from typing import Dict, List, Optional

from ml_metadata.proto import metadata_store_pb2

from core import nodes
from core.fingerprint import READER_MODULES, TRANSFORM_MODULES
from pipeline.report import facts
from pipeline.summary import run_outputs

# Modules whose code TFX cannot see and that the pipeline fingerprints (pipeline/builder.py).
FINGERPRINTED = {"CSV reader": READER_MODULES,
                 "Transform code": TRANSFORM_MODULES,
                 "Trainer code": ("models",)}
HISTORY_RUNS = 10


def spans_read(config, examples, input_base: Optional[str] = None) -> List[Dict[str, object]]:
    """The spans and files ExampleGen read (its span and the window before it), rows each;
    input_base: where the step that reads them sees the data (default: the config's)."""
    from components.example_gen.csv_reader import count_rows, files_in_window
    from components.drift_gate.component import span_label

    # On Kubeflow the examples carry no span (the driver task resolved it): the newest there is,
    # which is the one the driver picks.
    span = _custom(examples, "span")
    span = int(span) if span is not None else 10 ** 9
    by_span = files_in_window(input_base or str(config.data.input_base), config.data.file_pattern,
                              span,
                              config.data.span_window)
    return [{"span": span_label(s, config.data.file_pattern),
             "files": [{"path": path, "rows": count_rows(path)} for path in files]}
            for s, files in by_span.items()]


def _failed_steps(store, run) -> List[str]:
    failed = []
    for execution in store.get_executions_by_context(run.id):
        if execution.last_known_state == metadata_store_pb2.Execution.FAILED:
            for context in store.get_contexts_by_execution(execution.id):
                if context.type == "node":
                    failed.append(context.name.split(".")[-1])
    return failed


def _custom(artifact, key):
    """A custom property's value, whichever kind (KFP's metadata turns integers to doubles)."""
    value = artifact.custom_properties.get(key)
    if value is None or value.WhichOneof("value") is None:
        return None
    found = getattr(value, value.WhichOneof("value"))
    return int(found) if isinstance(found, float) and found.is_integer() else found


def collect(store, config, run, error: Optional[str] = None) -> Dict[str, object]:
    """Everything the HTML and Markdown reports show, as plain data, from the metadata store."""
    key_metric = facts.snake_case(next(iter(config.evaluation.thresholds)))
    return from_outputs(run_outputs(store, run), config, run.name, error,
                        _failed_steps(store, run),
                        facts.history(store, config, key_metric, HISTORY_RUNS))


def from_outputs(outputs: Dict, config, run_id: str, error: Optional[str] = None,
                 failed_steps: Optional[List[str]] = None,
                 history: Optional[List[Dict]] = None,
                 input_base: Optional[str] = None) -> Dict[str, object]:
    """The report's content from the run's artifacts ((node id, output key) -> MLMD artifact),
    wherever they were read: the local metadata store, or a step's inputs on Kubeflow."""
    from core.fingerprint import code_fingerprint
    from pipeline.report.plots import metrics_by_slice

    get = outputs.get
    report: Dict[str, object] = {
        "pipeline": config.pipeline_name, "run_id": run_id, "error": error,
        "failed_steps": failed_steps or [], "config_hash": facts.config_hash(config),
        "fingerprints": {name: code_fingerprint(*modules)
                         for name, modules in FINGERPRINTED.items()},
        "spans": spans_read(config, get(nodes.EXAMPLES), input_base)
        if get(nodes.EXAMPLES) else [],
    }
    statistics = get(nodes.STATISTICS)
    report["features"] = facts.feature_statistics(statistics) if statistics else {}
    anomalies = get(nodes.ANOMALIES)
    report["anomalies"] = facts.anomalies(anomalies) if anomalies else None
    drift = get(nodes.DRIFT)
    report["drift"] = facts.drift_result(drift) if drift else None
    if report["drift"] is not None:
        report["drift"]["action"] = config.drift.on_drift

    evaluation, blessing = get(nodes.EVALUATION), get(nodes.BLESSING)
    by_slice = metrics_by_slice(evaluation.uri) if evaluation else {}
    validation = facts.validation_result(evaluation.uri) if evaluation else None
    baseline = get(nodes.BASELINE)
    report["by_slice"] = by_slice
    report["baseline_version"] = (_custom(baseline, "serving_version") or None) if baseline \
        else None
    report["thresholds"] = facts.threshold_rows(config, by_slice, validation)
    report["blessed"] = None if blessing is None else bool(_custom(blessing, "blessed"))
    report["failures"] = (facts.failure_lines(validation)
                          if validation is not None and report["blessed"] is False else [])
    pushed = get(nodes.PUSHED_MODEL)
    report["pushed_to"] = (_custom(pushed, "pushed_destination") or None) if pushed and _custom(
        pushed, "pushed") else None
    report["decision"] = decision(report)
    model_run = get(nodes.MODEL_RUN)
    report["training"] = facts.training_history(model_run.uri) if model_run else {}
    report["key_metric"] = facts.snake_case(next(iter(config.evaluation.thresholds)))
    report["history"] = history
    return report


def decision(report: Dict[str, object]) -> str:
    """The blessing decision, and what was pushed, in one sentence."""
    if report["blessed"] is None:
        where = ", ".join(report["failed_steps"]) or "an earlier step"
        return (f"Not evaluated: the run stopped at {where}; nothing was "
                "pushed and the serving model is untouched.")
    if report["blessed"] is False:
        serving = (f"version {report['baseline_version']} keeps serving"
                   if report["baseline_version"] else "serving is untouched")
        return (f"Not blessed: {len(report['failures'])} threshold(s) failed "
                f"({'; '.join(report['failures'])}); nothing was pushed and {serving}.")
    if report["pushed_to"]:
        return (f"Blessed: every threshold held, and the model serves as {report['pushed_to']}"
                + (f" (it replaced version {report['baseline_version']})."
                   if report["baseline_version"] else " (the first model to serve)."))
    return "Blessed, but nothing new was pushed (the pusher did not run or reused its cache)."
