"""What the report shows, read back from ML Metadata and the run's artifacts.

Every step may be missing (a run stopped by a gate has no model): each reader returns None or an
empty value then, and the report says why.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import Dict, List, Optional, Tuple

from ml_metadata.proto import metadata_store_pb2

from core import nodes
from pipeline.summary import failure_lines, run_outputs

# What to do about each kind of anomaly ExampleValidator reports (TFDV's AnomalyInfo.Type).
ADVICE = {
    "ENUM_TYPE_UNEXPECTED_STRING_VALUES": "fix the rows, or add the value to the feature's "
                                          "domain in the schema if it is real",
    "FLOAT_TYPE_SMALL_FLOAT": "check the unit and source of the values, or widen float_domain",
    "FLOAT_TYPE_BIG_FLOAT": "check the unit and source of the values, or widen float_domain",
    "FEATURE_TYPE_LOW_FRACTION_PRESENT": "find why values are missing upstream, or lower the "
                                         "feature's presence.min_fraction",
    "SCHEMA_MISSING_COLUMN": "restore the column in the files, or remove it from the schema",
    "DATASET_LOW_NUM_EXAMPLES": "check that the night's files are complete",
}
DEFAULT_ADVICE = "fix the data, or update the reviewed schema if the change is intended"


@dataclasses.dataclass
class FeatureSplit:
    count: int
    missing: int
    kind: str  # "numeric" or "categorical"
    # numeric: (low, high, count) buckets; categorical: (value, count), most frequent first.
    buckets: List[Tuple] = dataclasses.field(default_factory=list)
    mean: Optional[float] = None

    @property
    def presence(self) -> float:
        return 1.0 - self.missing / self.count if self.count else 0.0


def load_statistics(uri: str, split: str):
    from tensorflow_data_validation.utils import stats_util

    return stats_util.load_stats_binary(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"))


def split_names(artifact) -> List[str]:
    return json.loads(artifact.properties["split_names"].string_value)


def feature_statistics(statistics) -> Dict[str, Dict[str, FeatureSplit]]:
    """feature -> split -> what the report shows of it."""
    result: Dict[str, Dict[str, FeatureSplit]] = {}
    for split in split_names(statistics):
        dataset = load_statistics(statistics.uri, split).datasets[0]
        for feature in dataset.features:
            name = feature.path.step[0]
            if feature.HasField("num_stats"):
                common = feature.num_stats.common_stats
                histogram = next((h for h in feature.num_stats.histograms if h.type == 0), None)
                buckets = [(b.low_value, b.high_value, b.sample_count)
                           for b in (histogram.buckets if histogram else [])]
                entry = FeatureSplit(dataset.num_examples, int(common.num_missing), "numeric",
                                     buckets, feature.num_stats.mean)
            else:
                common = feature.string_stats.common_stats
                buckets = [(v.value, v.frequency) for v in feature.string_stats.top_values]
                entry = FeatureSplit(dataset.num_examples, int(common.num_missing),
                                     "categorical", buckets)
            result.setdefault(name, {})[split] = entry
    return result


def anomalies(artifact) -> List[Dict[str, str]]:
    """One row per anomaly: split, feature, kind, TFDV's description, what to do."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    from components.anomaly_gate.component import read_anomalies

    rows = []
    for split in split_names(artifact):
        found = read_anomalies(artifact.uri, split)
        for feature, info in sorted(found.anomaly_info.items()):
            for reason in info.reason:
                kind = anomalies_pb2.AnomalyInfo.Type.Name(reason.type)
                rows.append({"split": split, "feature": feature, "kind": kind,
                             "description": reason.description,
                             "advice": ADVICE.get(kind, DEFAULT_ADVICE)})
        for reason in found.dataset_anomaly_info.reason:
            kind = anomalies_pb2.AnomalyInfo.Type.Name(reason.type)
            rows.append({"split": split, "feature": "(whole dataset)", "kind": kind,
                         "description": reason.description,
                         "advice": ADVICE.get(kind, DEFAULT_ADVICE)})
    return rows


def snake_case(class_name: str) -> str:
    """A metric's class name as TFMA names its values: SparseCategoricalAccuracy ->
    sparse_categorical_accuracy, AUC -> auc."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", class_name).lower()


def threshold_rows(config, by_slice, validation) -> List[Dict[str, object]]:
    """Each configured bound with the value it judged and pass/fail (None: not evaluated)."""
    failed = set()
    if validation is not None:
        for per_slice in validation.metric_validations_per_slice:
            for failure in per_slice.failures:
                failed.add((failure.metric_key.name, failure.metric_key.is_diff))
    overall = by_slice.get("all", {})
    rows = []
    for class_name, bounds in config.evaluation.thresholds.items():
        metric = snake_case(class_name)
        values = overall.get(metric, {})
        candidate, baseline = values.get("candidate"), values.get("baseline")
        verdict = None if validation is None else (metric, False) not in failed
        for label, bound in (("at least", bounds.lower_bound), ("at most", bounds.upper_bound)):
            if bound is not None:
                rows.append({"metric": metric, "rule": f"{label} {bound:g}",
                             "value": candidate, "passed": verdict})
        change = (bounds.max_decrease, "change vs serving at least -{:g}") if (
            bounds.max_decrease is not None) else (bounds.max_increase,
                                                   "change vs serving at most +{:g}")
        if change[0] is not None:
            diff = None if candidate is None or baseline is None else candidate - baseline
            rows.append({"metric": metric, "rule": change[1].format(change[0]), "value": diff,
                         "passed": None if validation is None else
                         (metric, True) not in failed if baseline is not None else "no baseline"})
    return rows


def validation_result(evaluation_uri: str):
    import tensorflow_model_analysis as tfma

    return tfma.load_validation_result(evaluation_uri)


def validation_failures(evaluation_uri: str) -> List[str]:
    return failure_lines(validation_result(evaluation_uri))


def training_history(model_run_uri: str) -> Dict[str, List[float]]:
    """Loss and metrics per epoch, as the Trainer recorded them (components/trainer/training.py)."""
    import tensorflow as tf

    path = os.path.join(model_run_uri, "history.json")  # components.trainer.training.HISTORY_FILE
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def drift_result(artifact) -> Optional[dict]:
    """What components.drift_gate.component measured (None when the artifact holds no result)."""
    import tensorflow as tf

    from components.drift_gate.component import RESULT_FILE

    path = os.path.join(artifact.uri, RESULT_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def config_hash(config) -> str:
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16]


def runs_of_pipeline(store, pipeline_name: str) -> List[metadata_store_pb2.Context]:
    """The pipeline's runs, oldest first (a run's executions carry the pipeline's context)."""
    pipeline = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if pipeline is None:
        return []
    executions = {e.id for e in store.get_executions_by_context(pipeline.id)}
    runs = []
    for run in store.get_contexts_by_type("pipeline_run"):
        if any(e.id in executions for e in store.get_executions_by_context(run.id)):
            runs.append(run)
    return sorted(runs, key=lambda c: (c.create_time_since_epoch, c.id))


def history(store, config, metric: str, last: int) -> List[Dict[str, object]]:
    """The newest `last` runs: run id, key metric (candidate, overall), rows per split, blessed."""
    from pipeline.report.plots import metrics_by_slice

    rows = []
    metric_cache: Dict[str, Optional[float]] = {}
    for run in runs_of_pipeline(store, config.pipeline_name)[-last:]:
        outputs = run_outputs(store, run)
        row: Dict[str, object] = {"run_id": run.name, "metric": None, "blessed": None}
        statistics = outputs.get(nodes.STATISTICS)
        if statistics is not None:
            for split in split_names(statistics):
                row[f"rows_{split}"] = load_statistics(statistics.uri,
                                                       split).datasets[0].num_examples
        evaluation = outputs.get(nodes.EVALUATION)
        if evaluation is not None:
            if evaluation.uri not in metric_cache:  # a cached evaluation is the same artifact
                metric_cache[evaluation.uri] = metrics_by_slice(evaluation.uri).get(
                    "all", {}).get(metric, {}).get("candidate")
            row["metric"] = metric_cache[evaluation.uri]
        blessing = outputs.get(nodes.BLESSING)
        if blessing is not None:
            row["blessed"] = bool(blessing.custom_properties["blessed"].int_value)
        rows.append(row)
    return rows
