"""What SkewCheck measures between the training window's statistics and the serving span's, each
with TFDV: its skew comparator per feature, presence (features the app stopped sending), values
training never had (the SERVING environment), and the mean length of lists."""

from typing import Dict, List

from components.span_statistics import JSD, L_INF

LENGTH = "mean list length"
# At most this many unseen values are named per feature (their count covers them all).
UNSEEN_SHOWN = 10


def _feature(statistics, name: str):
    """A feature's statistics in a one-dataset DatasetFeatureStatisticsList; None if absent."""
    for feature in statistics.datasets[0].features:
        if feature.path.step and feature.path.step[0] == name:
            return feature
    return None


def _common(feature):
    return getattr(feature, feature.WhichOneof("stats")).common_stats


def presence(statistics, name: str, is_list: bool) -> float:
    """The share of rows that hold the feature; of a list, a value (an empty list counts as
    absent: a history the updater stopped filling)."""
    rows = statistics.datasets[0].num_examples
    feature = _feature(statistics, name)
    if feature is None or not rows:
        return 0.0
    common = _common(feature)
    share = common.num_non_missing / rows
    if not is_list or common.min_num_values >= 1:
        return share
    if common.max_num_values == 0:
        return 0.0
    # Some lists empty: the share of empty ones from TFDV's quantiles of the values per row.
    buckets = common.num_values_histogram.buckets
    total = sum(b.sample_count for b in buckets)
    empty = sum(b.sample_count for b in buckets if b.high_value < 1)
    return share * (1 - empty / total) if total else share


def mean_length(statistics, name: str) -> float:
    feature = _feature(statistics, name)
    return _common(feature).avg_num_values if feature is not None else 0.0


def skew_comparator(training, serving, schema, numeric: set, thresholds: Dict[str, float]
                    ) -> List[Dict]:
    """TFDV's skew comparator per feature in `thresholds`: Jensen-Shannon divergence for numeric
    ones, L-infinity distance for the rest (tfdv.validate_statistics with serving_statistics)."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2

    compared = schema_pb2.Schema()
    compared.CopyFrom(schema)
    # A reviewed schema may leave a model input out: compared all the same, without constraints.
    for name in sorted(set(thresholds) - {f.name for f in compared.feature}):
        compared.feature.add(name=name, type=schema_pb2.FLOAT if name in numeric
                             else schema_pb2.BYTES)
    measures = {}
    for feature in compared.feature:
        if feature.name not in thresholds:
            continue
        if feature.name in numeric:
            feature.skew_comparator.jensen_shannon_divergence.threshold = thresholds[feature.name]
            measures[feature.name] = JSD
        else:
            feature.skew_comparator.infinity_norm.threshold = thresholds[feature.name]
            measures[feature.name] = L_INF
    anomalies = tfdv.validate_statistics(training, compared, serving_statistics=serving)
    distances = {info.path.step[0]: measurement.value
                 for info in anomalies.drift_skew_info
                 for measurement in info.skew_measurements}
    return [{"feature": name, "measure": measures[name], "distance": distances.get(name),
             "threshold": thresholds[name],
             "skewed": distances.get(name) is not None and distances[name] > thresholds[name]}
            for name in sorted(measures)]


def list_lengths(training, serving, lists: List[str], ratio: float) -> List[Dict]:
    """Each list's mean length at serving against training's: skewed below `ratio` of it. The
    distance is the share of training's length lost, its threshold 1 - ratio."""
    rows = []
    for name in lists:
        trained, served = mean_length(training, name), mean_length(serving, name)
        if trained <= 0:
            continue
        distance = max(0.0, 1 - served / trained)
        rows.append({"feature": name, "measure": LENGTH, "distance": distance,
                     "threshold": 1 - ratio, "skewed": served < ratio * trained,
                     "training": trained, "serving": served})
    return rows


def missing(training, serving, names: List[str], served: set, lists: set, ratio: float
            ) -> List[Dict]:
    """Features present in training and (nearly) absent at serving: presence below `ratio` of
    training's; a column the serving span lacks is absent everywhere."""
    rows = []
    for name in names:
        trained = presence(training, name, name in lists)
        at_serving = presence(serving, name, name in lists) if name in served else 0.0
        if trained > 0 and at_serving < ratio * trained:
            rows.append({"feature": name, "training_presence": round(trained, 4),
                         "serving_presence": round(at_serving, 4)})
    return rows


def unseen(training, serving, label: str, categorical: List[str]) -> List[Dict]:
    """Values of categorical features that training never had, TFDV's way: a schema inferred from
    the training statistics (string domains), the serving statistics validated against it in the
    SERVING environment (the label not in it); each flagged feature's unseen values from the
    serving statistics, most frequent first."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    schema = tfdv.infer_schema(training)
    schema.default_environment.extend(["TRAINING", "SERVING"])
    for feature in schema.feature:
        if feature.name == label:
            feature.not_in_environment.append("SERVING")
    anomalies = tfdv.validate_statistics(serving, schema, environment="SERVING")
    unexpected = anomalies_pb2.AnomalyInfo.ENUM_TYPE_UNEXPECTED_STRING_VALUES
    rows = []
    for name in categorical:
        info = anomalies.anomaly_info.get(name)
        if info is None or not any(r.type == unexpected for r in info.reason):
            continue
        known = set(tfdv.get_domain(schema, name).value)
        feature = _feature(serving, name)
        values = sorted(((b.label, b.sample_count)
                         for b in feature.string_stats.rank_histogram.buckets
                         if b.label not in known), key=lambda v: -v[1])
        rows.append({"feature": name, "values": [v for v, _ in values[:UNSEEN_SHOWN]],
                     "count": int(sum(n for _, n in values))})
    return rows
