"""The run summary's lines about the evaluation: which slice failed, and what the baseline was."""
from __future__ import annotations

CACHED = ["CsvExampleGen", "Trainer", "ServingBaseline", "Evaluator", "Pusher"]


def _summary(**changes) -> str:
    """The console summary of a run's facts with these fields changed."""
    from components.run_report.console import summary
    from components.run_report.facts import RunFacts

    fields = dict(pipeline="demo", run_id="r", key_metric="sparse_categorical_accuracy", ran=[],
                  cached=CACHED, blessed=True, pushed_to="/serving/demo/17")
    return summary(RunFacts(**{**fields, **changes}))


def test_each_failed_threshold_names_its_slice():
    from components.run_report import words
    from components.run_report.artifacts import refusals
    from tensorflow_model_analysis.proto import validation_result_pb2
    from tensorflow_model_analysis.slicer import slicer_lib

    result = validation_result_pb2.ValidationResult()
    for slice_key, value in (((), -0.02), ((("site", "north"),), -0.05)):
        per_slice = result.metric_validations_per_slice.add()
        per_slice.slice_key.CopyFrom(slicer_lib.serialize_slice_key(slice_key))
        failure = per_slice.failures.add()
        failure.metric_key.name = "sparse_categorical_accuracy"
        failure.metric_key.is_diff = True
        failure.metric_value.double_value.value = value
    overall, north = (words.refusal(r) for r in refusals(result))
    assert overall.startswith(
        "sparse_categorical_accuracy (change vs baseline) on Overall = -0.0200")
    assert north.startswith(
        "sparse_categorical_accuracy (change vs baseline) on site:north = -0.0500")


def test_a_cached_evaluation_made_before_anything_served_says_what_serves_now():
    lines = _summary(serving_now="17")
    assert "none serving yet" not in lines
    assert "none when this model was evaluated" in lines and "v17 serves now" in lines


def test_a_fresh_evaluation_with_nothing_serving_says_so():
    # A first run pushes, so something serves once it ends; its evaluation had no baseline.
    lines = _summary(ran=CACHED, cached=[], serving_now="17")
    assert "baseline:   none serving yet; absolute thresholds only" in lines
    assert "baseline:   none serving yet" in _summary(serving_now=None)
