"""What the DriftCheck and DriftGate steps run (their executors: components/function_executor.py
says why they are apart from component.py, which says what they do)."""


import json
from typing import Dict, List


from components.function_executor import FunctionExecutor
from components.span_statistics import (  # noqa: F401  (span_statistics: where callers find it)
    JSD, L_INF, numeric_features, read_check_result, span_label, span_statistics,
    write_check_result)
from core.config import ReaderSettings

RESULT_FILE = "drift.json"


class DriftError(RuntimeError):
    """The newest span drifted from the previous one beyond a threshold; the message says which
    features, by how much, and what to do."""


def measure(current, previous, schema, features: Dict, thresholds: Dict[str, float]
            ) -> List[Dict]:
    """Each compared feature: its distance to the previous span, threshold, and whether it
    drifted (TFDV's validate_statistics with a drift comparator per feature)."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2

    numeric = numeric_features(features)
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
    return read_check_result(uri, RESULT_FILE)


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
    write_check_result(drift.uri, RESULT_FILE, result)




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
