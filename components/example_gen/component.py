"""A CsvExampleGen executor that types columns from the config instead of guessing them.

The reading, checking and typing are components/example_gen/csv_reader.py's (no TFX or Beam there);
this module packs the reader's settings into ExampleGen's custom_config and wires the reader into
FileBasedExampleGen as a Beam source: data files (a window of the newest N spans), their byte
ranges spread over workers, then parsed rows.

The rows travel through Beam in batches, not one element each: split into train/eval by TFX's own
hash (base_example_gen_executor._PartitionFn, so every example lands in the split it always did)
and written as TFX's WriteSplit names its files (Split-NAME/data_tfrecord-*.gz). TFX's Do
partitions, serializes and reshuffles one element per row; here that Beam bookkeeping is per
batch of BATCH_ROWS, and there is no shuffle before writing: each worker parses and writes the
file ranges SpreadSplits gave it, so nothing holds more than a range (the in-memory DirectRunner
kept every row of the night for TFX's Reshuffle: 1.70 GB at 1M rows against 0.85 GB, measured
in bench/README.md). Rows stay in file order, as they did on the DirectRunner before (its
Reshuffle reorders runs of thousands, never rows); on Dataflow TFX's shuffle also mixed rows,
which the Trainer's shuffle buffer (training.shuffle_buffer) does here.
"""
from __future__ import annotations

import itertools
import json
import os
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import apache_beam as beam
import tensorflow as tf
from google.protobuf import any_pb2, json_format, wrappers_pb2
from tfx.components.example_gen import base_example_gen_executor, utils, write_split
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from core.config import ReaderSettings
from components.example_gen.tfrecord_batches import WriteBatchesToTFRecord
from components.example_gen.csv_reader import (BATCH_ROWS, SPAN_SPECS, SPLIT_BYTES, DataError,
                                               file_splits, files_in_window, read_split)


def reader_settings(reader: ReaderSettings, code_fingerprint: str
                    ) -> example_gen_pb2.CustomConfig:
    """ExampleGen's custom_config: the reader's settings as the JSON DriftCheck also gets (a
    StringValue in its Any; the fingerprint makes a change to this reader's code miss the
    cache)."""
    packed = any_pb2.Any()
    packed.Pack(wrappers_pb2.StringValue(value=json.dumps(
        {"reader": reader.model_dump(mode="json"), "code_fingerprint": code_fingerprint},
        sort_keys=True)))
    return example_gen_pb2.CustomConfig(custom_config=packed)


def _settings(exec_properties: Mapping[str, Any]) -> ReaderSettings:
    raw = exec_properties.get("custom_config")
    config = example_gen_pb2.CustomConfig()
    if isinstance(raw, str):
        json_format.Parse(raw, config)
    elif raw is not None:
        config.CopyFrom(raw)
    text = wrappers_pb2.StringValue()
    if not config.custom_config.Unpack(text):
        raise ValueError("ExampleGen's custom_config does not hold the reader settings; build it "
                         "with components.example_gen.component.reader_settings")
    return ReaderSettings.model_validate(json.loads(text.value)["reader"])


def _batches(split: Tuple[str, int, int], settings: Mapping[str, Any]) -> Iterator[List[bytes]]:
    """One file range's serialized examples, BATCH_ROWS at a time."""
    records = read_split(split, settings)
    while True:
        batch = list(itertools.islice(records, BATCH_ROWS))
        if not batch:
            return
        yield batch


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(List[bytes])
def _CsvToBatches(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],  # noqa: N802
                  split_pattern: str) -> beam.pvalue.PCollection:
    reader = _settings(exec_properties)
    input_base = exec_properties["input_base"]
    span = int(exec_properties.get("span") or 0)
    if any(spec in reader.file_pattern for spec in SPAN_SPECS):
        by_span = files_in_window(input_base, reader.file_pattern, span, reader.span_window)
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
            | "ParseCsv" >> beam.FlatMap(_batches, reader.model_dump()))


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(bytes)
def _CsvToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],  # noqa: N802
                   split_pattern: str) -> beam.pvalue.PCollection:
    """TFX's source interface: one serialized example per element."""
    return (pipeline
            | "CsvToBatches" >> _CsvToBatches(exec_properties, split_pattern)
            | "Unbatch" >> beam.FlatMap(iter))


def _split_batch(batch: List[bytes], buckets: List[int],
                 split_config: example_gen_pb2.SplitConfig) -> Iterator[Tuple[int, List[bytes]]]:
    """(output split index, its examples) for one batch, by TFX's own partition function."""
    by_split: Dict[int, List[bytes]] = {}
    for record in batch:
        index = base_example_gen_executor._PartitionFn(record, len(buckets), buckets,  # noqa: SLF001
                                                       split_config)
        by_split.setdefault(index, []).append(record)
    yield from by_split.items()


class _CountExamples(beam.DoFn):
    """The examples of a batch, counted as TFX's WriteSplit counts them."""

    def __init__(self):
        self._count = beam.metrics.Metrics.counter(write_split.METRICS_NAMESPACE, "num_instances")

    def process(self, batch: List[bytes]) -> Iterator[List[bytes]]:
        self._count.inc(len(batch))
        yield batch


class Executor(BaseExampleGenExecutor):
    """Config-typed CSV reader for FileBasedExampleGen (used via CsvExampleGen's executor slot)."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802
        return _CsvToExamples

    def Do(self, input_dict: Dict[str, List[Any]], output_dict: Dict[str, List[Any]],  # noqa: N802
           exec_properties: Dict[str, Any]) -> None:
        """BaseExampleGenExecutor.Do (TFX 1.16) with batches where it moves single rows: the
        same split names, files, payload and file format properties."""
        self._log_startup(input_dict, output_dict, exec_properties)
        input_config = example_gen_pb2.Input()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY],
                                  input_config)
        output_config = example_gen_pb2.Output()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY],
                                  output_config)
        split_config = output_config.split_config
        if len(input_config.splits) != 1 or not split_config.splits:
            raise ValueError("the CSV ExampleGen takes one input split and hash-splits it into "
                             "the output splits (pipeline/builder.py builds it so)")
        file_format = exec_properties.get(standard_component_specs.OUTPUT_FILE_FORMAT_KEY,
                                          example_gen_pb2.FILE_FORMAT_UNSPECIFIED)
        file_format_name = write_split.to_file_format_str(file_format)  # raises but for gzip
        payload_format = exec_properties.get(standard_component_specs.OUTPUT_DATA_FORMAT_KEY)
        if payload_format not in (None, example_gen_pb2.FORMAT_TF_EXAMPLE):
            raise ValueError("the CSV ExampleGen writes tf.Examples only")

        examples = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.EXAMPLES_KEY])
        split_names = utils.generate_output_split_names(input_config, output_config)
        examples.split_names = artifact_utils.encode_split_names(split_names)
        buckets = list(itertools.accumulate(split.hash_buckets for split in split_config.splits))
        exec_properties["_beam_pipeline_args"] = self._beam_pipeline_args or []
        with self._make_beam_pipeline() as pipeline:
            by_split = (pipeline
                        | "InputToRecord" >> _CsvToBatches(exec_properties,
                                                            input_config.splits[0].pattern)
                        | "SplitBatches" >> beam.FlatMap(_split_batch, buckets, split_config)
                        | "SplitData" >> beam.Partition(lambda item, _n: item[0], len(buckets)))
            for index, name in enumerate(split_names):
                (by_split[index]  # noqa: B018 (a Beam pipeline, not an expression)
                 | f"Batches[{name}]" >> beam.Values()
                 | f"Count[{name}]" >> beam.ParDo(_CountExamples())
                 | f"Write[{name}]" >> WriteBatchesToTFRecord(
                     os.path.join(artifact_utils.get_split_uri([examples], name),
                                  write_split.DEFAULT_TF_RECORD_FILE_NAME),
                     file_name_suffix=".gz"))
        if payload_format:
            examples_utils.set_payload_format(examples, payload_format)
        if file_format:
            examples_utils.set_file_format(examples, file_format_name)


__all__ = ["Executor", "reader_settings"]
