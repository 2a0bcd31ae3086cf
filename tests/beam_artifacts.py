"""What each Beam step of a night wrote, in a form two runners can be compared by: Beam's
in-memory runner and Flink (tests/test_flink_nights.py) must agree on every artifact.

- CsvExampleGen: the same serialized tf.Examples in each split (as sorted lists: a runner
  shards and orders its output as it likes, Flink's two subtasks write two files).
- StatisticsGen: the same statistics, features sorted by path, floats to 12 significant digits
  (sums taken in another order differ in the last bits).
- Transform: the same vocabulary files byte for byte, and the same transformed features of the
  eval split to a few float32 ulps (rtol 4e-6 ~ 32 ulps, atol 4e-6): the analyzers' means and
  variances are float32 sums, and Flink combines its subtasks' partial sums in another order, so
  a standardized value near 1.0 can differ by one ulp (1.19e-6; seen in CI).
"""
from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format


def latest(outputs: Path, component: str, key: str) -> Path:
    """The newest execution's folder of component's output key under <output_dir>/pipeline."""
    base = outputs / "pipeline" / component / key
    return max(base.iterdir(), key=lambda p: int(p.name))


def examples(outputs: Path) -> dict:
    import tensorflow as tf

    folder = latest(outputs, "CsvExampleGen", "examples")
    return {split.name: sorted(record.numpy() for path in sorted(split.glob("*.gz"))
                               for record in tf.data.TFRecordDataset(str(path), "GZIP"))
            for split in sorted(folder.glob("Split-*"))}


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def statistics(outputs: Path) -> dict:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    folder = latest(outputs, "StatisticsGen", "statistics")
    found = {}
    for split in sorted(folder.glob("Split-*")):
        stats = statistics_pb2.DatasetFeatureStatisticsList()
        stats.ParseFromString((split / "FeatureStats.pb").read_bytes())
        found[split.name] = [
            {**_rounded(json_format.MessageToDict(dataset)),
             "features": sorted((_rounded(json_format.MessageToDict(f)) for f in
                                 dataset.features), key=lambda f: str(f.get("path")))}
            for dataset in stats.datasets]
    return found


def vocabularies(outputs: Path) -> dict:
    assets = latest(outputs, "Transform", "transform_graph") / "transform_fn" / "assets"
    return {path.name: path.read_bytes() for path in sorted(assets.glob("*"))}


def transformed(outputs: Path, records: list) -> dict:
    """The Transform graph of this night applied to records: feature -> numpy array."""
    import tensorflow as tf
    import tensorflow_transform as tft

    graph = tft.TFTransformOutput(str(latest(outputs, "Transform", "transform_graph")))
    parsed = tf.io.parse_example(tf.constant(records), graph.raw_feature_spec())
    return {name: tf.sparse.to_dense(value).numpy() if isinstance(value, tf.SparseTensor)
            else value.numpy() for name, value in graph.transform_raw_features(parsed).items()}


def assert_same_beam_artifacts(ours: Path, in_memory: Path) -> None:
    """Every Beam step's artifacts of two nights on the same data agree (module docstring)."""
    import numpy as np

    records = examples(ours)
    assert records == examples(in_memory), "CsvExampleGen's examples differ"
    assert statistics(ours) == statistics(in_memory), "StatisticsGen's statistics differ"
    assert vocabularies(ours) == vocabularies(in_memory), "Transform's vocabularies differ"
    sample = records["Split-eval"][:500]
    mine, theirs = transformed(ours, sample), transformed(in_memory, sample)
    assert sorted(mine) == sorted(theirs)
    for name in mine:
        if mine[name].dtype.kind in "fc":
            np.testing.assert_allclose(mine[name], theirs[name], rtol=4e-6, atol=4e-6,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
