"""The Evaluator's extractors: TFMA's per-example extracts and slice keys, and its metrics,
from a cheaper unbatch-and-slice stage (components.evaluator.component.custom_extractors) and the
Keras metrics' plain-input combiner (components.evaluator.keras_metric_inputs) and TFMA's metric
stages
made
cheaper (components.evaluator.metric_stages)."""
from __future__ import annotations

import contextlib
import json
from collections import Counter

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

    from components.evaluator.component import custom_extractors

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


def test_the_metrics_of_every_slice_are_tfmas(tmp_path):
    import apache_beam as beam
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis import constants
    from tfx_bsl.tfxio import tf_example_record

    from components.evaluator.component import custom_extractors
    from components.evaluator.keras_metric_inputs import plain_keras_metric_inputs
    from components.evaluator.metric_stages import cheaper_metric_stages

    eval_config = _eval_config(label_key="kind_xf")
    results = {}
    # Ours as the Executor runs it on the in-memory DirectRunner: our extractors, the Keras
    # metrics' plain-input combiner, and TFMA's metric stages without their per-example set-up
    # and hot-key fan-out.
    for name, extractors in [("tfma", None), ("ours", custom_extractors(None, eval_config))]:
        tfx_io = tf_example_record.TFExampleBeamRecord(
            physical_format="inmem", telemetry_descriptors=["test"],
            raw_record_column_name=constants.ARROW_INPUT_COLUMN)
        ours = name == "ours"
        with (plain_keras_metric_inputs() if ours else contextlib.nullcontext()), \
                (cheaper_metric_stages(True) if ours else contextlib.nullcontext()), \
                beam.Pipeline() as pipeline:
            _ = (pipeline | beam.Create(_examples()) | tfx_io.BeamSource(batch_size=3)
                 | tfma.ExtractEvaluateAndWriteResults(
                     eval_config=eval_config, extractors=extractors,
                     output_path=str(tmp_path / name)))
        result = tfma.load_eval_result(str(tmp_path / name))
        results[name] = {str(k): m for k, m in result.slicing_metrics}
    assert results["ours"] == results["tfma"]
    counts = Counter({k: m[""][""]["example_count"]["doubleValue"]
                      for k, m in results["ours"].items()})
    assert counts["()"] == 40 and counts["(('site', 'south'),)"] == 12  # row 7 has no site
