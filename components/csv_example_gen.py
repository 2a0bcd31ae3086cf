"""A CsvExampleGen executor that types columns from the config instead of guessing them.

TFX's own CSV reader infers types and has no notion of null markers, so a numeric column with "NA"
cells becomes text. This one declares: numeric columns are floats, categorical ones and the label
are text, null markers are missing values (absent from the tf.Example), ignored columns are dropped.
Anything else (a missing or unexpected column, text in a numeric column, an empty file) stops the
run with the file, line, column and value. It also reads a window of the newest N spans.
"""
from __future__ import annotations

import csv
import io
import os
import re
from typing import Any, Dict, Iterator, List, Mapping

import apache_beam as beam
import tensorflow as tf
from google.protobuf import any_pb2, json_format, struct_pb2
from tfx.components.example_gen import utils as example_gen_utils
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.proto import example_gen_pb2


class DataError(ValueError):
    """Input data that the pipeline cannot use; the message says where and what to do."""


def reader_settings(features: Mapping[str, Any], null_markers: List[str], file_pattern: str,
                    span_window: int, code_fingerprint: str) -> example_gen_pb2.CustomConfig:
    """Packs what the executor needs into ExampleGen's custom_config (the fingerprint makes a
    change to this reader's code miss the cache)."""
    settings = struct_pb2.Struct()
    settings.update({"features": dict(features), "null_markers": list(null_markers),
                     "file_pattern": file_pattern, "span_window": span_window,
                     "code_fingerprint": code_fingerprint})
    packed = any_pb2.Any()
    packed.Pack(settings)
    return example_gen_pb2.CustomConfig(custom_config=packed)


def _settings(exec_properties: Mapping[str, Any]) -> Dict[str, Any]:
    raw = exec_properties.get("custom_config")
    config = example_gen_pb2.CustomConfig()
    if isinstance(raw, str):
        json_format.Parse(raw, config)
    elif raw is not None:
        config.CopyFrom(raw)
    settings = struct_pb2.Struct()
    if not config.custom_config.Unpack(settings):
        raise ValueError("ExampleGen's custom_config does not hold the reader settings; build it "
                         "with components.csv_example_gen.reader_settings")
    return json_format.MessageToDict(settings)


_SPEC_REGEX = {"{SPAN}": r"(?P<span>\d+)", "{YYYY}": r"(?P<year>\d{4})",
               "{MM}": r"(?P<month>\d{2})", "{DD}": r"(?P<day>\d{2})"}


def _span_of(match: re.Match) -> int:
    groups = match.groupdict()
    if groups.get("span") is not None:
        return int(groups["span"])
    return example_gen_utils.date_to_span_number(
        int(groups["year"]), int(groups["month"]), int(groups["day"]))


def files_in_window(input_base: str, file_pattern: str, newest_span: int, window: int
                    ) -> Dict[int, List[str]]:
    """Files of the newest `window` spans up to newest_span, by span number."""
    glob_pattern, regex = file_pattern, re.escape(file_pattern)
    for spec, group in _SPEC_REGEX.items():
        glob_pattern = glob_pattern.replace(spec, "*")
        regex = regex.replace(re.escape(spec), group)
    regex = regex.replace(r"\*", "[^/]*")
    by_span: Dict[int, List[str]] = {}
    for path in tf.io.gfile.glob(os.path.join(input_base, glob_pattern)):
        match = re.fullmatch(regex, os.path.relpath(path, input_base))
        if match:
            by_span.setdefault(_span_of(match), []).append(path)
    spans = sorted(s for s in by_span if s <= newest_span)[-window:]
    return {span: sorted(by_span[span]) for span in spans}


def _column_kinds(features: Mapping[str, Any]) -> Dict[str, str]:
    kinds = {features["label"]: "text"}
    kinds.update({name: "number" for name in features.get("numeric", [])})
    kinds.update({name: "text" for name in features.get("categorical", [])})
    kinds.update({name: "ignored" for name in features.get("ignored", [])})
    return kinds


def parse_csv(path: str, text: str, features: Mapping[str, Any], null_markers: List[str]
              ) -> Iterator[tf.train.Example]:
    """tf.Examples from one CSV file's text; raises DataError on the first unusable cell."""
    kinds = _column_kinds(features)
    nulls = set(null_markers)
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if not header or not any(h.strip() for h in header):
        raise DataError(f"{path} is empty: a data file needs a header line and at least one row")
    header = [h.strip() for h in header]
    missing = [c for c in kinds if c not in header]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; every file needs the columns "
                        f"declared in the config's features ({list(kinds)})")
    unexpected = [c for c in header if c not in kinds]
    if unexpected:
        raise DataError(f"{path}: unexpected column(s) {unexpected}; declare them under "
                        "features (numeric, categorical, or ignored) in the config")
    count = 0
    for line_number, row in enumerate(rows, start=2):
        if not row:
            continue
        if len(row) != len(header):
            raise DataError(f"{path}, line {line_number}: {len(row)} cells where the header has "
                            f"{len(header)}")
        example = tf.train.Example()
        for column, cell in zip(header, row):
            kind = kinds[column]
            if kind == "ignored" or cell in nulls:
                continue
            feature = example.features.feature[column]
            if kind == "text":
                feature.bytes_list.value.append(cell.encode())
                continue
            try:
                feature.float_list.value.append(float(cell))
            except ValueError:
                raise DataError(
                    f"{path}, line {line_number}, column '{column}': {cell!r} is not a number; "
                    "fix the value, or add it to data.null_markers if it means 'missing'"
                ) from None
        count += 1
        yield example
    if count == 0:
        raise DataError(f"{path} has a header but no rows")


def _read_file(path: str, settings: Mapping[str, Any]) -> Iterator[tf.train.Example]:
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    yield from parse_csv(path, text, settings["features"], settings["null_markers"])


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def _CsvToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],  # noqa: N802
                   split_pattern: str) -> beam.pvalue.PCollection:
    settings = _settings(exec_properties)
    input_base = exec_properties["input_base"]
    span = int(exec_properties.get("span") or 0)
    if any(spec in settings["file_pattern"] for spec in _SPEC_REGEX):
        by_span = files_in_window(input_base, settings["file_pattern"], span,
                                  int(settings["span_window"]))
        files = [f for span_files in by_span.values() for f in span_files]
    else:
        files = sorted(tf.io.gfile.glob(os.path.join(input_base, split_pattern)))
    if not files:
        raise DataError(f"no data files match {os.path.join(input_base, split_pattern)}")
    return (pipeline
            | "DataFiles" >> beam.Create(files)
            | "ParseCsv" >> beam.FlatMap(_read_file, settings))


class Executor(BaseExampleGenExecutor):
    """Config-typed CSV reader for FileBasedExampleGen (used via CsvExampleGen's executor slot)."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802
        return _CsvToExamples


__all__ = ["DataError", "Executor", "files_in_window", "parse_csv", "reader_settings"]
