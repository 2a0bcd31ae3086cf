"""What the SkewCheck and SkewGate steps run (their executors: components/function_executor.py
says why they are apart from component.py, which says what they do)."""

import csv
import hashlib
import json
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from components.function_executor import FunctionExecutor
from components.skew_gate import measures
from components.span_statistics import (numeric_features, read_check_result, span_label,
                                        span_statistics, write_check_result)
from core.config import PipelineConfig, ReaderSettings

RESULT_FILE = "skew.json"
# Every span under serving_base is a candidate (the newest with min_rows wins).
ALL_SPANS = 10 ** 6


class SkewError(RuntimeError):
    """The serving span is skewed from the training window; the message says which features,
    how, and what to do."""


def skew_settings(config: PipelineConfig) -> Dict:
    """SkewCheck's settings (pipeline/builder.py adds the code fingerprint): the training reader,
    each model input's threshold, the other rules' figures, and the inputs a serving span lacks
    by design (retrieve's candidate: the signature scores every item)."""
    skew = config.skew
    return {"reader": config.reader_settings.model_dump(mode="json"),
            "thresholds": config.skew_thresholds(), "min_rows": skew.min_rows,
            "list_length_ratio": skew.list_length_ratio, "presence_ratio": skew.presence_ratio,
            "not_served": [config.retrieval.candidate] if config.retrieval else []}


def spans_fingerprint(serving_base: str, file_pattern: str) -> str:
    """What the serving spans hold now: a digest of their files' names, sizes and times. A step's
    cache key covers only its inputs and settings, and requests arrive whether the training data
    changed or not: in SkewCheck's settings on a local run (pipeline/run.py), new requests re-run
    it. (On Kubeflow the spec is compiled once: the step is never cached there, spec.py.)"""
    from components.example_gen.csv_reader import files_in_window

    digest = hashlib.sha256()
    for _, files in sorted(files_in_window(serving_base, file_pattern, 10 ** 9,
                                           ALL_SPANS).items()):
        for path in files:
            stat = tf.io.gfile.stat(path)
            digest.update(f"{path}\0{stat.length}\0{stat.mtime_nsec}\n".encode())
    return digest.hexdigest()[:16]


def serving_span(serving_base: str, file_pattern: str, min_rows: int
                 ) -> Optional[Tuple[int, List[str], List[str]]]:
    """(span, files, columns) of the newest span under serving_base with at least min_rows rows.
    A span may hold files of several signatures (the request sink writes one per signature, with
    its inputs as columns): the files of the columns with the most rows, read with one reader."""
    from components.example_gen.csv_reader import count_rows, files_in_window

    by_span = files_in_window(serving_base, file_pattern, 10 ** 9, ALL_SPANS)
    for span in sorted(by_span, reverse=True):
        rows = {path: count_rows(path) for path in by_span[span]}
        if sum(rows.values()) < min_rows:
            continue
        by_columns: Dict[tuple, List[str]] = {}
        for path in by_span[span]:
            by_columns.setdefault(tuple(header(path)), []).append(path)
        columns, files = max(by_columns.items(),
                             key=lambda item: sum(rows[path] for path in item[1]))
        return span, files, list(columns)
    return None


def header(path: str) -> List[str]:
    from components.example_gen.csv_reader import readline

    with tf.io.gfile.GFile(path, "rb") as f:
        return [h.strip() for h in next(csv.reader([readline(f, path, 1).decode()]), [])]


def serving_reader(reader: ReaderSettings, columns: List[str]) -> ReaderSettings:
    """The training reader's settings for a serving span: no label, and only the features its
    files hold (a column the config does not know is still refused by the reader)."""
    held = set(columns)
    features = reader.features
    served = {**features, "label": None,
              **{kind: [n for n in features[kind] if n in held]
                 for kind in ("numeric", "categorical", "ignored")},
              **{kind: {n: v for n, v in features[kind].items() if n in held}
                 for kind in ("ids", "lists")}}
    return reader.model_copy(update={"features": served})


def compare(training: Dict[int, List[str]], serving_base: str, schema, settings: Dict) -> Dict:
    """The skew result written to the artifact (and read by the report): the newest serving span
    against the training window's spans together, worst features first."""
    reader = ReaderSettings.model_validate(settings["reader"])
    label = lambda span: span_label(span, reader.file_pattern)  # noqa: E731
    result = {"serving_span": None, "training_spans": [label(s) for s in sorted(training)],
              "rows": {"training": 0, "serving": 0}, "features": [], "missing": [],
              "unseen": [], "note": "", "skewed": False}
    # The serving span is monitoring, not training data: a file the reader refuses (written by
    # something other than the request sink, which checks every record) is a note in the
    # report, not a failed night; the Prometheus file is then not rewritten, and
    # ServingSkewCheckStale says so after 36 h.
    try:
        found = serving_span(serving_base, reader.file_pattern, settings["min_rows"])
        if found is not None:
            span, files, columns = found
            served = span_statistics(files, serving_reader(reader, columns))
    except (ValueError, csv.Error, tf.errors.OpError) as e:
        result["note"] = (f"The serving spans under {serving_base} could not be read: {e}. "
                          "Nothing was compared; move the file away or fix it.")
        return result
    if found is None:
        result["note"] = (f"No serving span under {serving_base} with at least "
                          f"{settings['min_rows']} rows yet: nothing to compare.")
        return result
    features = reader.features
    trained = span_statistics([p for s in sorted(training) for p in training[s]], reader)
    result["serving_span"] = label(span)
    result["rows"] = {"training": trained.datasets[0].num_examples,
                      "serving": served.datasets[0].num_examples}
    compared = {n: t for n, t in settings["thresholds"].items() if n in columns}
    lists = [n for n in features["lists"] if n in columns]
    rows = measures.skew_comparator(trained, served, schema, numeric_features(features), compared)
    rows += measures.list_lengths(trained, served, lists,
                                  settings["list_length_ratio"])
    result["features"] = sorted(rows, key=lambda f: -(f["distance"] or 0) / f["threshold"])
    expected = [n for n in settings["thresholds"] if n not in settings["not_served"]]
    result["missing"] = measures.missing(trained, served, expected, set(columns),
                                         set(features["lists"]), settings["presence_ratio"])
    result["unseen"] = measures.unseen(trained, served, features["label"],
                                       [n for n in features["categorical"] if n in columns])
    result["skewed"] = bool(any(f["skewed"] for f in result["features"]) or result["missing"]
                            or result["unseen"])
    return result


def skew_message(result: Dict) -> str:
    parts = [f"'{f['feature']}' mean list length {f['serving']:.2f} at serving, "
             f"{f['training']:.2f} in training (below {1 - f['threshold']:g} of it)"
             if f["measure"] == measures.LENGTH else
             f"'{f['feature']}' {f['measure']} {f['distance']:.3f} > threshold "
             f"{f['threshold']:g}" for f in result["features"] if f["skewed"]]
    parts += [f"'{m['feature']}' missing at serving (in {m['serving_presence']:.0%} of rows, "
              f"{m['training_presence']:.0%} in training)" for m in result["missing"]]
    parts += [f"'{u['feature']}' has values training never had: "
              f"{', '.join(u['values'])} ({u['count']} rows)" for u in result["unseen"]]
    return (f"serving span {result['serving_span']} is skewed from the training spans "
            f"{', '.join(result['training_spans'])}: " + "; ".join(parts)
            + ". Check what the clients send for those features (a field no longer sent, a unit "
            "change, a new category, a history the updater stopped filling) and fix it there; if "
            "the change is real, train on data that has it, or raise skew.thresholds, or set "
            "skew.on_skew: warn. Nothing was pushed.")


def read_result(uri: str) -> Dict:
    return read_check_result(uri, RESULT_FILE)


def skew_check(examples, schema, skew, input_base: str, serving_base: str,
               settings: str) -> None:
    """Measures skew between the newest serving span and the training window ending at
    ExampleGen's span; `settings` is JSON (skew_settings, and code_fingerprint)."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.utils import io_utils

    from components.example_gen.csv_reader import files_in_window

    config = json.loads(settings)
    reader = ReaderSettings.model_validate(config["reader"])
    # ExampleGen's span (a float once it went through KFP's metadata); none: the newest there is.
    span = examples.get_custom_property("span")
    newest = int(span) if span is not None else 10 ** 9
    training = files_in_window(input_base, reader.file_pattern, newest, reader.span_window)
    schema_proto = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(schema.uri)) \
        if schema.uri else schema_pb2.Schema()
    result = compare(training, serving_base, schema_proto, config)
    write_check_result(skew.uri, RESULT_FILE, result)


def enforce(result: Dict, on_skew: str) -> None:
    """Stops the run when the serving span is skewed and the pipeline says stop; warn lets it
    go on (the report shows it)."""
    if on_skew == "stop" and result["skewed"]:
        raise SkewError(skew_message(result))


def skew_gate(skew, on_skew: str) -> None:
    """Fails the run, naming each skewed feature, when on_skew is "stop"."""
    enforce(read_result(skew.uri), on_skew)


class CheckExecutor(FunctionExecutor):
    FUNCTION = staticmethod(skew_check)


class GateExecutor(FunctionExecutor):
    FUNCTION = staticmethod(skew_gate)
