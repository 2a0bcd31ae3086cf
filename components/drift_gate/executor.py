"""What the DriftCheck and DriftGate steps run (their executors: components/function_executor.py
says why they are apart from component.py, which says what they do)."""


import datetime
import json
import os
from typing import Dict, List

import pyarrow as pa
import tensorflow as tf

from components.function_executor import FunctionExecutor
from core import storage
from core.config import ReaderSettings

RESULT_FILE = "drift.json"
JSD, L_INF = "Jensen-Shannon divergence", "L-infinity distance"


class DriftError(RuntimeError):
    """The newest span drifted from the previous one beyond a threshold; the message says which
    features, by how much, and what to do."""


def _numeric(features: Dict) -> set:
    """The numeric features, numeric lists (their values) and a regression's label (compared by
    Jensen-Shannon)."""
    label = {features["label"]} if features["label_kind"] == "number" else set()
    lists = {name for name, column in features["lists"].items()
             if column["element"] == "numeric"}
    return set(features["numeric"]) | lists | label


def span_statistics(files: List[str], reader: ReaderSettings):
    """TFDV statistics of the rows of one span's files, typed as the pipeline reads them."""
    from tensorflow_data_validation.statistics import stats_impl, stats_options
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    from components.example_gen.csv_reader import SPLIT_BYTES, file_splits, read_split

    features = reader.features
    numeric = _numeric(features)
    # Ids and lists too: TFDV compares a list's values, all of a span's lists together.
    names = [*dict.fromkeys([features["label"], *features["categorical"], *features["ids"],
                             *features["lists"], *numeric])]
    # The columns as the pipeline types them (numbers float, the rest bytes), whether a row
    # holds them or not; TFX-BSL decodes in C++, as TFDV's own readers do (a Python loop over
    # the parsed examples took 2 of a 30,000-row span's 2.7 s).
    schema = schema_pb2.Schema()
    for name in names:
        schema.feature.add(name=name, type=schema_pb2.FLOAT if name in numeric
                           else schema_pb2.BYTES)
    decoder = ExamplesToRecordBatchDecoder(schema.SerializeToString())
    # The pipeline's own reader, split by split: a large file is never held whole. It raises
    # DataError on a file without rows, so the span's table has rows: one batch once combined.
    settings = reader.model_dump()
    batches = [decoder.DecodeBatch(list(read_split(split, settings)))
               for path in files for split in file_splits(path, SPLIT_BYTES)]
    [rows] = pa.Table.from_batches(batches).combine_chunks().to_batches()
    return stats_impl.generate_statistics_in_memory(rows, stats_options.StatsOptions())


def measure(current, previous, schema, features: Dict, thresholds: Dict[str, float]
            ) -> List[Dict]:
    """Each compared feature: its distance to the previous span, threshold, and whether it
    drifted (TFDV's validate_statistics with a drift comparator per feature)."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2

    numeric = _numeric(features)
    compared = schema_pb2.Schema()
    compared.CopyFrom(schema)
    measures = {}
    for feature in compared.feature:
        if feature.name not in thresholds:
            continue
        threshold = thresholds[feature.name]
        if feature.name in numeric:
            feature.drift_comparator.jensen_shannon_divergence.threshold = threshold
            measures[feature.name] = JSD
        else:
            feature.drift_comparator.infinity_norm.threshold = threshold
            measures[feature.name] = L_INF
    anomalies = tfdv.validate_statistics(current, compared, previous_statistics=previous)
    distances = {}
    for info in anomalies.drift_skew_info:
        for measurement in info.drift_measurements:
            distances[info.path.step[0]] = measurement.value
    return [{"feature": name, "measure": measures[name], "distance": distances.get(name),
             "threshold": thresholds[name],
             "drifted": distances.get(name) is not None and distances[name] > thresholds[name]}
            for name in sorted(measures)]


def span_label(span: int, file_pattern: str) -> str:
    """A span as people name it: its date for dated spans (TFX numbers them in days since
    1970-01-01), else its number."""
    if "{YYYY}" in file_pattern:
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=span)).isoformat()
    return str(span)


def drift_message(result: Dict) -> str:
    drifted = [f for f in result["features"] if f["drifted"]]
    return (f"span {result['newest_span']} drifted from span {result['previous_span']} in "
            f"{len(drifted)} feature(s): " + "; ".join(
                f"'{f['feature']}' {f['measure']} {f['distance']:.3f} > threshold "
                f"{f['threshold']:g}" for f in drifted)
            + ". Check the new span's source; if the change is real, raise drift.thresholds for "
            "those features in the config, or set drift.on_drift: warn. Nothing was pushed.")


def compare_spans(by_span: Dict[int, List[str]], schema, reader: ReaderSettings,
                  thresholds: Dict[str, float]) -> Dict:
    """The drift result written to the artifact (and read by the report): the newest span
    against the span before (`features`, the gate's) and against the older spans of the training
    window together (`window`, when the window holds more than one older span)."""
    spans = sorted(by_span)
    result = {"features": [], "newest_span": None,
              "previous_span": None, "note": "", "window": None}
    if len(spans) < 2:
        result["note"] = "Only one span in the input: nothing to compare with yet."
        return result
    previous, newest = spans[-2], spans[-1]
    label = lambda span: span_label(span, reader.file_pattern)  # noqa: E731
    result["newest_span"], result["previous_span"] = label(newest), label(previous)
    current = span_statistics(by_span[newest], reader)
    result["features"] = measure(current, span_statistics(by_span[previous], reader), schema,
                                 reader.features, thresholds)
    older = spans[-reader.span_window:-1]
    if len(older) > 1:
        files = [path for span in older for path in by_span[span]]
        result["window"] = {"spans": [label(s) for s in older], "features": measure(
            current, span_statistics(files, reader), schema, reader.features, thresholds)}
    return result


def read_result(uri: str) -> Dict:
    with tf.io.gfile.GFile(os.path.join(uri, RESULT_FILE)) as f:
        return json.load(f)


def drift_check(examples, schema, drift, input_base: str, settings: str) -> None:
    """Measures drift between ExampleGen's span and the span before; `settings` is JSON: the
    reader's settings (core.config.ReaderSettings, as ExampleGen gets them), thresholds (per
    feature), code_fingerprint."""
    from tfx.utils import io_utils
    from tensorflow_metadata.proto.v0 import schema_pb2

    from components.example_gen.csv_reader import files_in_window

    config = json.loads(settings)
    reader = ReaderSettings.model_validate(config["reader"])
    # ExampleGen's span (a float once it went through KFP's metadata); none: the newest there is.
    span = examples.get_custom_property("span")
    newest = int(span) if span is not None else 10 ** 9
    window = max(2, reader.span_window)  # the span before, and the training window
    by_span = files_in_window(input_base, reader.file_pattern, newest, window)
    schema_proto = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(schema.uri)) \
        if schema.uri else schema_pb2.Schema()
    result = compare_spans(by_span, schema_proto, reader, config["thresholds"])
    storage.makedirs(drift.uri, tf.io.gfile.makedirs)
    with tf.io.gfile.GFile(os.path.join(drift.uri, RESULT_FILE), "w") as f:
        json.dump(result, f, indent=1)




def enforce(result: Dict, on_drift: str) -> None:
    """Stops the run when a feature drifted and the pipeline says stop; warn lets it go on."""
    if on_drift == "stop" and any(f["drifted"] for f in result["features"]):
        raise DriftError(drift_message(result))


def drift_gate(drift, on_drift: str) -> None:
    """Fails the run, naming each drifted feature, when on_drift is "stop"."""
    enforce(read_result(drift.uri), on_drift)


class CheckExecutor(FunctionExecutor):
    FUNCTION = staticmethod(drift_check)


class GateExecutor(FunctionExecutor):
    FUNCTION = staticmethod(drift_gate)
