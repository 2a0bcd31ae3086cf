"""components/csv_example_gen.Executor.Do moves batches where TFX's BaseExampleGenExecutor.Do moves
single rows: the same examples in the same splits, the same files and artifact properties."""
from __future__ import annotations

import glob
import gzip
import os

import pytest

from tests.helpers import read_as

FEATURES = read_as({"label": "kind", "numeric": ["length"], "categorical": ["site"]})


def _exec_properties(input_base: str) -> dict:
    from google.protobuf import json_format
    from tfx.proto import example_gen_pb2

    from components.example_gen.component import reader_settings
    from core.config import ReaderSettings

    splits = example_gen_pb2.SplitConfig(splits=[
        example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=3),
        example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)])
    return {
        "input_base": input_base,
        "input_config": json_format.MessageToJson(example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="data", pattern="*.csv")])),
        "output_config": json_format.MessageToJson(example_gen_pb2.Output(split_config=splits)),
        "custom_config": json_format.MessageToJson(reader_settings(
            ReaderSettings(features=FEATURES, null_markers=["NA"], file_pattern="*.csv",
                           span_window=1), "fingerprint")),
        "output_data_format": example_gen_pb2.FORMAT_TF_EXAMPLE,
        "output_file_format": example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }


def _run(executor_class, input_base: str, out: str):
    from tfx.types import standard_artifacts

    examples = standard_artifacts.Examples()
    examples.uri = out
    executor = executor_class(executor_class.Context(tmp_dir=os.path.join(out, ".tmp"),
                                                     unique_id="1"))
    executor.Do({}, {"examples": [examples]}, _exec_properties(input_base))
    records = {}
    for split in ("train", "eval"):
        files = sorted(glob.glob(os.path.join(out, f"Split-{split}", "*")))
        records[split] = (sorted(os.path.basename(f) for f in files),
                          sorted(_tfrecords(b"".join(gzip.open(f).read() for f in files))))
    return examples, records


def _tfrecords(data: bytes) -> list:
    """The records of an uncompressed TFRecord stream, read by TensorFlow's own reader."""
    import tempfile

    import tensorflow as tf

    with tempfile.NamedTemporaryFile(suffix=".tfrecord") as f:
        f.write(data)
        f.flush()
        return [r.numpy() for r in tf.data.TFRecordDataset(f.name)]


@pytest.mark.slow
def test_the_splits_files_and_properties_are_tfx_own(tmp_path):
    from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor

    from components.example_gen.component import Executor

    class TfxDo(Executor):  # TFX 1.16's own Do: one Beam element per row
        Do = BaseExampleGenExecutor.Do

    data = tmp_path / "data"
    data.mkdir()
    rows = [f"{'ab'[i % 2]},{['north', 'south', 'NA'][i % 3]},{i / 7:.3f}\n"
            for i in range(2000)]
    (data / "part-1.csv").write_text("kind,site,length\n" + "".join(rows[:1500]))
    (data / "part-2.csv").write_text("kind,site,length\n" + "".join(rows[1500:]))

    ours, our_records = _run(Executor, str(data), str(tmp_path / "ours"))
    tfx, tfx_records = _run(TfxDo, str(data), str(tmp_path / "tfx"))
    assert our_records == tfx_records
    assert len(our_records["train"][1]) + len(our_records["eval"][1]) == 2000
    assert 0 < len(our_records["eval"][1]) < len(our_records["train"][1])
    assert ours.split_names == tfx.split_names
    assert ours.get_string_custom_property("payload_format") == \
        tfx.get_string_custom_property("payload_format") == "FORMAT_TF_EXAMPLE"
    assert ours.get_string_custom_property("file_format") == \
        tfx.get_string_custom_property("file_format") == "tfrecords_gzip"
