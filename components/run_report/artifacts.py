"""What each of a run's artifacts holds, read from its files: statistics, anomalies, drift, the
evaluation's metrics and validation, the training record. Each reader takes the artifact (or its
URI) and returns plain values (facts.py's types)."""
from __future__ import annotations

import json
import os
from typing import Collection, Dict, List, Optional

from components.run_report.facts import (Anomaly, FeatureSplit, Refusal, Retrieval,
                                         ValuesPerExample)

# components.trainer.retrieval_quality.RETRIEVAL_FILE, named here: that module loads TensorFlow
# and the model's features (tests/components/test_run_report_lists_and_retrieval.py checks both
# name one file).
RETRIEVAL_FILE = "retrieval.json"

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


def split_names(artifact) -> List[str]:
    """A statistics or anomalies artifact's splits (a declared property: plain on every runner)."""
    return json.loads(artifact.properties["split_names"].string_value)


def load_statistics(uri: str, split: str):
    from tensorflow_data_validation.utils import stats_util

    return stats_util.load_stats_binary(os.path.join(uri, f"Split-{split}", "FeatureStats.pb"))


def values_per_example(common) -> ValuesPerExample:
    """A list feature's values per example from TFDV's CommonStatistics; the num_values
    histogram's edges when it is TFDV's quantiles one (the buckets' lows, then the last high)."""
    histogram = common.num_values_histogram
    quantiles = ([b.low_value for b in histogram.buckets] + [histogram.buckets[-1].high_value]
                 if histogram.type == histogram.QUANTILES and histogram.buckets else [])
    return ValuesPerExample(int(common.min_num_values), float(common.avg_num_values),
                            int(common.max_num_values), quantiles)


def feature_statistics(statistics, lists: Collection[str] = ()
                       ) -> Dict[str, Dict[str, FeatureSplit]]:
    """feature -> split -> what the report shows of it; `lists`: the list features
    (features.lists), whose values per example are read too."""
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
            if name in lists:
                entry.values = values_per_example(common)
            result.setdefault(name, {})[split] = entry
    return result


def anomalies(artifact) -> List[Anomaly]:
    """One row per anomaly: split, feature, kind, TFDV's description, what to do."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    from components.anomaly_gate.executor import read_anomalies

    rows = []
    for split in split_names(artifact):
        found = read_anomalies(artifact.uri, split)
        reasons = [(feature, reason) for feature, info in sorted(found.anomaly_info.items())
                   for reason in info.reason]
        reasons += [("(whole dataset)", reason) for reason in found.dataset_anomaly_info.reason]
        for feature, reason in reasons:
            kind = anomalies_pb2.AnomalyInfo.Type.Name(reason.type)
            rows.append(Anomaly(split, feature, kind, reason.description,
                                ADVICE.get(kind, DEFAULT_ADVICE)))
    return rows


def _read_json(path: str):
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


def drift_result(artifact) -> Optional[dict]:
    """What components.drift_gate.component measured (None when the artifact holds no result)."""
    from components.drift_gate.executor import RESULT_FILE

    return _read_json(os.path.join(artifact.uri, RESULT_FILE))


def skew_result(artifact) -> Optional[dict]:
    """What components.skew_gate.component measured: the serving span against the training
    spans (None when the artifact holds no result)."""
    from components.skew_gate.executor import RESULT_FILE

    return _read_json(os.path.join(artifact.uri, RESULT_FILE))


def training_history(model_run_uri: str) -> Dict[str, List[float]]:
    """Loss and metrics per epoch, as the Trainer recorded them (components/trainer/training.py)."""
    # components.trainer.training.HISTORY_FILE, named here: that module loads Keras and the model.
    return _read_json(os.path.join(model_run_uri, "history.json")) or {}


def retrieval_quality(model_run_uri: str) -> Optional[Retrieval]:
    """The Trainer's hit rates of `retrieve` on the eval split (None: no retrieval, as in a model
    without `retrieval:` in its config)."""
    found = _read_json(os.path.join(model_run_uri, RETRIEVAL_FILE))
    if found is None:
        return None
    return Retrieval(k=int(found["k"]), clicked_examples=int(found["clicked_examples"]),
                     items=int(found["items"]), hit_rate=float(found["hit_rate"]),
                     popular_hit_rate=float(found["popular_hit_rate"]))


def metrics_by_slice(evaluation_uri: str) -> Dict[str, Dict[str, Dict[str, float]]]:
    """slice name -> metric -> model -> value (model 'candidate' or 'baseline')."""
    import tensorflow_model_analysis as tfma

    result: Dict[str, Dict[str, Dict[str, float]]] = {}
    for per_slice in tfma.load_metrics(evaluation_uri):
        keys = per_slice.slice_key.single_slice_keys
        name = ", ".join(f"{k.column}={k.bytes_value.decode() or k.int64_value or k.float_value}"
                         for k in keys) or "all"
        for entry in per_slice.metric_keys_and_values:
            if entry.key.is_diff or not entry.value.HasField("double_value"):
                continue
            result.setdefault(name, {}).setdefault(entry.key.name, {})[
                entry.key.model_name or "candidate"] = entry.value.double_value.value
    return result


def validation_result(evaluation_uri: str):
    import tensorflow_model_analysis as tfma

    return tfma.load_validation_result(evaluation_uri)


def refusals(result) -> List[Refusal]:
    """Each failed threshold of a TFMA ValidationResult, with the slice it failed on."""
    from tensorflow_model_analysis.proto import config_pb2
    from tensorflow_model_analysis.slicer import slicer_lib

    found = []
    for per_slice in result.metric_validations_per_slice:
        slice_name = slicer_lib.stringify_slice_key(
            slicer_lib.deserialize_slice_key(per_slice.slice_key))
        for failure in per_slice.failures:
            threshold = failure.metric_threshold
            bounds, change = threshold.value_threshold, threshold.change_threshold
            found.append(Refusal(
                metric=failure.metric_key.name, slice=slice_name,
                is_diff=failure.metric_key.is_diff,
                # TFMA leaves the value out when the metric was not computed ('Metric not found.')
                value=failure.metric_value.double_value.value
                if failure.metric_value.HasField("double_value") else None,
                lower_bound=bounds.lower_bound.value if bounds.HasField("lower_bound") else None,
                upper_bound=bounds.upper_bound.value if bounds.HasField("upper_bound") else None,
                higher_is_better={config_pb2.MetricDirection.HIGHER_IS_BETTER: True,
                                  config_pb2.MetricDirection.LOWER_IS_BETTER: False}.get(
                    change.direction) if threshold.HasField("change_threshold") else None,
                absolute=change.absolute.value if change.HasField("absolute") else None,
                relative=change.relative.value if change.HasField("relative") else None))
    return found
