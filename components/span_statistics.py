"""TFDV statistics of a span's CSV files, read as the pipeline reads them, and a span's name: what
DriftCheck (span against span) and SkewCheck (serving span against the training window) both
measure with."""

import datetime
import json
import os
from typing import Dict, List

import pyarrow as pa

from core.config import ReaderSettings

JSD, L_INF = "Jensen-Shannon divergence", "L-infinity distance"


def numeric_features(features: Dict) -> set:
    """The numeric features, numeric lists (their values) and a regression's label (compared by
    Jensen-Shannon). A serving span's features have no label (label None)."""
    label = ({features["label"]} if features["label"] is not None
             and features["label_kind"] == "number" else set())
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
    numeric = numeric_features(features)
    # Ids and lists too: TFDV compares a list's values, all of a span's lists together.
    label = [features["label"]] if features["label"] is not None else []
    names = [*dict.fromkeys([*label, *features["categorical"], *features["ids"],
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


def span_label(span: int, file_pattern: str) -> str:
    """A span as people name it: its date for dated spans (TFX numbers them in days since
    1970-01-01), else its number."""
    if "{YYYY}" in file_pattern:
        return (datetime.date(1970, 1, 1) + datetime.timedelta(days=span)).isoformat()
    return str(span)


def write_check_result(uri: str, name: str, result: Dict) -> None:
    """A check's result as JSON file `name` of its output artifact, where its gate and the run
    report read it (read_check_result)."""
    import tensorflow as tf

    from core import storage

    storage.makedirs(uri, tf.io.gfile.makedirs)
    with tf.io.gfile.GFile(os.path.join(uri, name), "w") as f:
        json.dump(result, f, indent=1)


def read_check_result(uri: str, name: str) -> Dict:
    import tensorflow as tf

    with tf.io.gfile.GFile(os.path.join(uri, name)) as f:
        return json.load(f)
