"""The Evaluator gives TFMA's per-example slice keys and TFMA's metrics with its changes to TFMA
(components.evaluator.tfma_patches: the unbatch-and-slice stage, the Keras metrics' plain-input
combiner, the metric preprocessing built once, no hot-key fan-out in one worker) and without them
(another TFMA)."""
from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

pytestmark = pytest.mark.slow  # TensorFlow, TFT, TFMA or server work: not in make test-fast

# TensorFlow, Beam and TFMA are imported in the functions that use them: collection stays cheap
# (tests/test_collection.py).

SITES = ["north", "south", "east"]


def _examples(n=40):
    """Rows as ExampleGen writes them: the group is missing in some, and one row has neither
    categorical value; `id` tells the examples apart, `probabilities` is a prediction
    stored with the example (TFMA's model-agnostic evaluation: no model to load)."""
    import tensorflow as tf

    examples = []
    for i in range(n):
        feature = {"id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                   "kind_xf": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
                   "length": tf.train.Feature(
                       float_list=tf.train.FloatList(value=[30.0 + i])),
                   "probabilities": tf.train.Feature(float_list=tf.train.FloatList(
                       value=[0.7, 0.2, 0.1] if i % 4 else [0.1, 0.3, 0.6]))}
        if i != 7:
            feature["site"] = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[SITES[i % 3].encode()]))
        if i % 5 and i != 7:
            feature["group"] = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[b"a" if i % 2 else b"b"]))
        examples.append(tf.train.Example(features=tf.train.Features(feature=feature))
                        .SerializeToString())
    return examples


def _eval_config(label_key="id"):
    import tensorflow_model_analysis as tfma

    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(label_key=label_key, prediction_key="probabilities")],
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=["site"]),
                       tfma.SlicingSpec(feature_keys=["group"]),
                       tfma.SlicingSpec(feature_keys=["site", "group"]),
                       tfma.SlicingSpec(feature_values={"site": "south"})],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name="ExampleCount"),
            tfma.MetricConfig(class_name="SparseCategoricalAccuracy"),
            tfma.MetricConfig(class_name="SparseCategoricalCrossentropy",
                              config='"name": "loss"')])])


def _slice_keys_per_example(extractors, folder):
    """{id: sorted slice keys} of every example, through `extractors` in batches of 3."""
    import apache_beam as beam
    from tensorflow_model_analysis import constants
    from tensorflow_model_analysis.api import model_eval_lib
    from tfx_bsl.tfxio import tf_example_record

    tfx_io = tf_example_record.TFExampleBeamRecord(
        physical_format="inmem", telemetry_descriptors=["test"],
        raw_record_column_name=constants.ARROW_INPUT_COLUMN)
    with beam.Pipeline() as pipeline:
        extracts = (pipeline | beam.Create(_examples()) | tfx_io.BeamSource(batch_size=3)
                    | model_eval_lib.BatchedInputsToExtracts())
        for extractor in extractors:
            extracts = extracts | extractor.stage_name >> extractor.ptransform
        _ = (extracts
             | beam.Map(lambda e: json.dumps([
                 int(e[constants.LABELS_KEY][0]),
                 sorted(str(k) for k in e[constants.SLICE_KEY_TYPES_KEY])]))
             | beam.io.WriteToText(str(folder / "slices")))
    rows = [json.loads(line) for path in folder.glob("slices*") for line in open(path)]
    return {i: tuple(keys) for i, keys in rows}


def test_every_example_gets_tfmas_own_slice_keys(tmp_path):
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.extractors import slice_key_extractor

    from components.evaluator.unbatch_and_slice import custom_extractors

    eval_config = _eval_config()
    tfmas = tfma.default_extractors(eval_config=eval_config)
    ours = custom_extractors(None, eval_config)
    # Ours replaces TFMA's last two stages (unbatch, slice keys) and keeps the slice stage's
    # name, after which TFMA's metrics run.
    assert [e.stage_name for e in ours] == [e.stage_name for e in tfmas[:-2]] + [
        slice_key_extractor.SLICE_KEY_EXTRACTOR_STAGE_NAME]
    expected = _slice_keys_per_example(tfmas, tmp_path / "tfma")
    assert len(expected) == 40
    assert expected[7] == ("()",)  # neither site nor group: the overall slice only
    assert _slice_keys_per_example(ours, tmp_path / "ours") == expected


def _metrics_per_slice(eval_config, folder, patches: bool):
    """{slice: metrics} of an evaluation of _examples(); patches: built as the Executor builds it
    on the in-memory DirectRunner (tfma_patches.applied, then our extractors where it applies)."""
    import contextlib

    import apache_beam as beam
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis import constants
    from tfx_bsl.tfxio import tf_example_record

    from components.evaluator import tfma_patches
    from components.evaluator.unbatch_and_slice import custom_extractors

    tfx_io = tf_example_record.TFExampleBeamRecord(
        physical_format="inmem", telemetry_descriptors=["test"],
        raw_record_column_name=constants.ARROW_INPUT_COLUMN)
    with (tfma_patches.applied(one_worker=True) if patches else contextlib.nullcontext()) as ours:
        with beam.Pipeline() as pipeline:
            _ = (pipeline | beam.Create(_examples()) | tfx_io.BeamSource(batch_size=3)
                 | tfma.ExtractEvaluateAndWriteResults(
                     eval_config=eval_config,
                     extractors=custom_extractors(None, eval_config) if ours else None,
                     output_path=str(folder)))
    result = tfma.load_eval_result(str(folder))
    return bool(ours), {str(k): m for k, m in result.slicing_metrics}


def test_the_metrics_of_every_slice_are_tfmas(tmp_path, monkeypatch, caplog):
    from components.evaluator import tfma_patches

    eval_config = _eval_config(label_key="kind_xf")
    patched, ours = _metrics_per_slice(eval_config, tmp_path / "ours", patches=True)
    _, tfmas = _metrics_per_slice(eval_config, tmp_path / "tfma", patches=False)
    assert patched and ours == tfmas
    counts = Counter({k: m[""][""]["example_count"]["doubleValue"] for k, m in ours.items()})
    assert counts["()"] == 40 and counts["(('site', 'south'),)"] == 12  # row 7 has no site
    # On a TFMA the changes were not read against: TFMA's own path, logged, the same metrics.
    monkeypatch.setattr(tfma_patches, "READ_AGAINST", ("0.0.0",))
    with caplog.at_level(logging.WARNING):
        patched, fallback = _metrics_per_slice(eval_config, tmp_path / "fallback", patches=True)
    assert not patched and fallback == tfmas
    assert any("TFMA's own stages" in r.getMessage() for r in caplog.records)
