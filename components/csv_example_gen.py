"""A CsvExampleGen executor that types columns from the config instead of guessing them.

The reading, checking and typing are components/csv_reader.py's (no TFX or Beam there); this
module packs the reader's settings into ExampleGen's custom_config and wires the reader into
FileBasedExampleGen as a Beam source: data files (a window of the newest N spans), their byte
ranges spread over workers, then parsed rows.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping

import apache_beam as beam
import tensorflow as tf
from google.protobuf import any_pb2, json_format, struct_pb2
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.proto import example_gen_pb2

from components.csv_reader import (SPAN_SPECS, SPLIT_BYTES, DataError, file_splits,
                                   files_in_window, read_split)


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


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(bytes)
def _CsvToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],  # noqa: N802
                   split_pattern: str) -> beam.pvalue.PCollection:
    settings = _settings(exec_properties)
    input_base = exec_properties["input_base"]
    span = int(exec_properties.get("span") or 0)
    if any(spec in settings["file_pattern"] for spec in SPAN_SPECS):
        by_span = files_in_window(input_base, settings["file_pattern"], span,
                                  int(settings["span_window"]))
        files = [f for span_files in by_span.values() for f in span_files]
    else:
        files = sorted(tf.io.gfile.glob(os.path.join(input_base, split_pattern)))
    if not files:
        raise DataError(f"no data files match {os.path.join(input_base, split_pattern)}")
    return (pipeline
            | "DataFiles" >> beam.Create(files)
            | "FileSplits" >> beam.FlatMap(file_splits, SPLIT_BYTES)
            # Spreads the splits over workers (Dataflow, Flink, Spark; DirectRunner processes).
            | "SpreadSplits" >> beam.Reshuffle()
            | "ParseCsv" >> beam.FlatMap(read_split, settings))


class Executor(BaseExampleGenExecutor):
    """Config-typed CSV reader for FileBasedExampleGen (used via CsvExampleGen's executor slot)."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802
        return _CsvToExamples


__all__ = ["Executor", "reader_settings"]
