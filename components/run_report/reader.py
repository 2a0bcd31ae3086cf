"""The one reader of a run's facts: RunFacts from ML Metadata (a local run's store) or from the
run's artifacts as a step receives them (the RunReport step on Kubeflow). Every custom property
is read by mlmd.property_value, every artifact's files by artifacts.py."""
from __future__ import annotations

import hashlib
import re
from typing import Dict, List, Optional, Sequence

from components.run_report import artifacts, mlmd
from components.run_report.facts import HistoryRun, Refusal, RunFacts, SpanRead, ThresholdRow
from core import nodes
from core.fingerprint import READER_MODULES, TRAINER_MODULES, TRANSFORM_MODULES

# Modules whose code TFX cannot see and that the pipeline fingerprints (pipeline/builder.py).
FINGERPRINTED = {"CSV reader": READER_MODULES,
                 "Transform code": TRANSFORM_MODULES, "Trainer code": TRAINER_MODULES}
HISTORY_RUNS = 10


def snake_case(class_name: str) -> str:
    """A metric's class name as TFMA names its values: SparseCategoricalAccuracy ->
    sparse_categorical_accuracy, AUC -> auc."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).lower()


def key_metric(config) -> str:
    return snake_case(next(iter(config.evaluation.thresholds)))


def read_run(store, config, run, error: Optional[str] = None, ran: Sequence[str] = (),
             cached: Sequence[str] = (), serving_now: Optional[str] = None,
             history_runs: int = HISTORY_RUNS) -> RunFacts:
    """A run in the local metadata store, with the runner's own record of it (ran, cached, the
    error it stopped with, what serves now) and the pipeline's last history_runs runs."""
    facts = from_outputs(mlmd.run_outputs(store, run), config, run.name, error)
    facts.failed_steps = mlmd.failed_steps(store, run)
    facts.ran, facts.cached, facts.serving_now = list(ran), list(cached), serving_now
    facts.history = history(store, config, facts.key_metric, history_runs)
    return facts


def from_outputs(outputs: Dict, config, run_id: str, error: Optional[str] = None,
                 input_base: Optional[str] = None) -> RunFacts:
    """The facts in the run's artifacts ((node id, output key) -> MLMD artifact), wherever they
    were read: the local metadata store, or a step's inputs on Kubeflow. input_base: where this
    process sees the data (default: the config's)."""
    from core.fingerprint import code_fingerprint

    get = outputs.get
    facts = RunFacts(
        pipeline=config.pipeline_name, run_id=run_id, key_metric=key_metric(config),
        config_hash=hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16],
        fingerprints={name: code_fingerprint(*modules)
                      for name, modules in FINGERPRINTED.items()}, error=error)
    if get(nodes.EXAMPLES):
        facts.spans = spans_read(config, get(nodes.EXAMPLES), input_base)
    if get(nodes.STATISTICS):
        facts.features = artifacts.feature_statistics(get(nodes.STATISTICS),
                                                      lists=config.features.lists)
    if get(nodes.ANOMALIES):
        facts.anomalies = artifacts.anomalies(get(nodes.ANOMALIES))
    if get(nodes.DRIFT):
        facts.drift = artifacts.drift_result(get(nodes.DRIFT))
        if facts.drift is not None:
            facts.drift["action"] = config.drift.on_drift
    if get(nodes.SKEW):
        facts.skew = artifacts.skew_result(get(nodes.SKEW))
        if facts.skew is not None:
            facts.skew["action"] = config.skew.on_skew
            recorded = get(nodes.SKEW).create_time_since_epoch  # ms; 0 in a Kubeflow step
            facts.skew["checked_at"] = recorded / 1000 if recorded else None
    evaluation = get(nodes.EVALUATION)
    refused = None  # None: not evaluated
    if evaluation is not None:
        facts.by_slice = artifacts.metrics_by_slice(evaluation.uri)
        refused = artifacts.refusals(artifacts.validation_result(evaluation.uri))
    if get(nodes.BASELINE):
        facts.baseline_version = _text(mlmd.property_value(get(nodes.BASELINE),
                                                           "serving_version"))
    if get(nodes.BLESSING):
        facts.blessed = mlmd.flag(get(nodes.BLESSING), "blessed")
    facts.thresholds = threshold_rows(config, facts.by_slice, refused)
    if refused is not None and facts.blessed is False:
        facts.refusals = refused
    pushed = get(nodes.PUSHED_MODEL)
    if pushed is not None and mlmd.flag(pushed, "pushed"):
        facts.pushed_to = _text(mlmd.property_value(pushed, "pushed_destination"))
    if get(nodes.RELEASE_STATUS):
        status = get(nodes.RELEASE_STATUS)
        facts.release = {key: _text(mlmd.property_value(status, key)) for key in (
            "action", "version", "previous", "phase", "message", "rollout")}
    if get(nodes.MODEL_RUN):
        facts.training = artifacts.training_history(get(nodes.MODEL_RUN).uri)
        facts.retrieval = artifacts.retrieval_quality(get(nodes.MODEL_RUN).uri)
    return facts


def _text(value) -> Optional[str]:
    return str(value) if value not in (None, "") else None


def spans_read(config, examples, input_base: Optional[str] = None) -> List[SpanRead]:
    """The spans and files ExampleGen read (its span and the window before it), rows each."""
    from components.drift_gate.executor import span_label
    from components.example_gen.csv_reader import count_rows, files_in_window

    # On Kubeflow the examples carry no span (the driver task resolved it): the newest there is,
    # which is the one the driver picks.
    span = mlmd.property_value(examples, "span")
    span = int(span) if span is not None else 10 ** 9
    by_span = files_in_window(input_base or str(config.data.input_base), config.data.file_pattern,
                              span, config.data.span_window)
    return [SpanRead(span_label(s, config.data.file_pattern),
                     [(path, count_rows(path)) for path in files])
            for s, files in by_span.items()]


def threshold_rows(config, by_slice, refusals: Optional[List[Refusal]]) -> List[ThresholdRow]:
    """Each configured bound with the value it judged and pass/fail; refusals None: the model was
    not evaluated."""
    failed = {(r.metric, r.is_diff) for r in refusals or []}
    overall = by_slice.get("all", {})
    rows = []
    for class_name, bounds in config.evaluation.thresholds.items():
        metric = snake_case(class_name)
        values = overall.get(metric, {})
        candidate, baseline = values.get("candidate"), values.get("baseline")
        verdict = None if refusals is None else (metric, False) not in failed
        for label, bound in (("at least", bounds.lower_bound), ("at most", bounds.upper_bound)):
            if bound is not None:
                rows.append(ThresholdRow(metric, f"{label} {bound:g}", candidate, verdict))
        change = (bounds.max_decrease, "change vs serving at least -{:g}") if (
            bounds.max_decrease is not None) else (bounds.max_increase,
                                                   "change vs serving at most +{:g}")
        if change[0] is not None:
            diff = None if candidate is None or baseline is None else candidate - baseline
            rows.append(ThresholdRow(
                metric, change[1].format(change[0]), diff,
                None if refusals is None else
                (metric, True) not in failed if baseline is not None else "no baseline"))
    return rows


def history(store, config, metric: str, last: int) -> List[HistoryRun]:
    """The newest `last` runs: run id, key metric (candidate, overall), rows per split, blessed."""
    rows = []
    # A cached step's output is the same artifact in each run that reused it: read it once.
    metric_cache: Dict[str, Optional[float]] = {}
    rows_cache: Dict[str, Dict[str, int]] = {}
    for run in mlmd.runs_of_pipeline(store, config.pipeline_name)[-last:]:
        outputs = mlmd.run_outputs(store, run)
        row = HistoryRun(run.name, None, None)
        statistics = outputs.get(nodes.STATISTICS)
        if statistics is not None:
            if statistics.uri not in rows_cache:
                rows_cache[statistics.uri] = {
                    split: artifacts.load_statistics(statistics.uri, split).datasets[0]
                    .num_examples for split in artifacts.split_names(statistics)}
            row.rows.update(rows_cache[statistics.uri])
        evaluation = outputs.get(nodes.EVALUATION)
        if evaluation is not None:
            if evaluation.uri not in metric_cache:
                metric_cache[evaluation.uri] = artifacts.metrics_by_slice(evaluation.uri).get(
                    "all", {}).get(metric, {}).get("candidate")
            row.metric = metric_cache[evaluation.uri]
        if outputs.get(nodes.BLESSING) is not None:
            row.blessed = mlmd.flag(outputs[nodes.BLESSING], "blessed")
        rows.append(row)
    return rows
