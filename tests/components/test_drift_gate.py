"""The drift gate on real spans with real TFDV: a span whose drifted_feature() moves up drifts
(in that feature only), and the pipeline's choice decides. Spans and names come from the bundled
config (tests/helpers.py); the bundled spans' own figures are tests/example's."""
from __future__ import annotations

import pytest
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tests.helpers import (add_drifted_span, copy_spans, drifted_feature, example_config,
                           newest_span, span_day, span_files)


def gate():
    """Imported when a test runs, not at collection (tests/README.md)."""
    import components.drift_gate.component

    return components.drift_gate.component


def reader():
    """Imported when a test runs, not at collection (tests/README.md)."""
    import components.example_gen.csv_reader

    return components.example_gen.csv_reader


CONFIG = example_config()
SCHEMA = text_format.Parse(CONFIG.schema_file.read_text(), schema_pb2.Schema())


def settings(**changes):
    """The reader's settings as the pipeline passes them, and the thresholds."""
    return CONFIG.reader_settings.model_copy(update=changes), CONFIG.drift_thresholds()


def newest_two(data) -> dict:
    return reader().files_in_window(str(data), CONFIG.data.file_pattern, 10 ** 6, 2)


def window_of_three(data) -> dict:
    return reader().files_in_window(str(data), CONFIG.data.file_pattern, 10 ** 6, 3)


def test_every_model_input_and_the_label_is_measured_with_its_kind():
    result = gate().compare_spans(newest_two(CONFIG.data.input_base), SCHEMA, *settings())
    by_feature = {f["feature"]: f for f in result["features"]}
    features = CONFIG.features
    assert set(by_feature) == {features.label, *features.model_inputs}
    assert all(by_feature[name]["measure"] == gate().JSD for name in features.numeric)
    assert all(by_feature[name]["measure"] == gate().L_INF
               for name in (features.label, *features.categorical))
    assert all(f["distance"] is not None for f in result["features"])


def test_a_moved_span_drifts_in_that_feature_only_and_stops_the_run(tmp_path):
    data = copy_spans(tmp_path)
    previous = newest_span(data).name
    add_drifted_span(data, "span-20991231")
    result = gate().compare_spans(newest_two(data), SCHEMA, *settings())
    drifted = [f for f in result["features"] if f["drifted"]]
    assert [f["feature"] for f in drifted] == [drifted_feature()]
    assert drifted[0]["distance"] > CONFIG.drift.numeric_threshold
    with pytest.raises(gate().DriftError) as stopped:
        gate().enforce(result, "stop")
    message = str(stopped.value)
    assert message.startswith(f"span 2099-12-31 drifted from span {span_day(previous)} in 1 "
                              f"feature(s): "
                              f"'{drifted_feature()}' Jensen-Shannon divergence 0.")
    assert "drift.thresholds" in message and "Nothing was pushed" in message


def test_warn_lets_a_drifted_span_through(tmp_path):
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20991231")
    result = gate().compare_spans(newest_two(data), SCHEMA, *settings())
    assert any(f["drifted"] for f in result["features"])
    gate().enforce(result, "warn")  # recorded for the report, not raised


def test_one_span_has_nothing_to_compare(tmp_path):
    span = newest_span(CONFIG.data.input_base)
    data = tmp_path / "data"
    (data / span.name).mkdir(parents=True)
    for file in span_files(span):
        (data / span.name / file.name).write_text(file.read_text())
    result = gate().compare_spans(newest_two(data), SCHEMA, *settings())
    assert result["features"] == [] and "nothing to compare" in result["note"]


def test_the_newest_span_is_also_measured_against_the_training_window(tmp_path):
    data = copy_spans(tmp_path)
    spans = sorted(p.name for p in data.iterdir())
    add_drifted_span(data, "span-20991231")
    moved = gate().compare_spans(window_of_three(data), SCHEMA, *settings(span_window=3))
    assert moved["window"]["spans"] == [span_day(s) for s in spans[-2:]]
    assert {f["feature"] for f in moved["window"]["features"]} == {
        f["feature"] for f in moved["features"]}
    assert [f["feature"] for f in moved["window"]["features"] if f["drifted"]] == [
        drifted_feature()]


def test_the_training_window_is_reported_not_a_gate(tmp_path):
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20991231")
    result = gate().compare_spans(window_of_three(data), SCHEMA, *settings(span_window=3))
    only_the_window = {**result, "features": [{**f, "drifted": False}
                                              for f in result["features"]]}
    gate().enforce(only_the_window, "stop")  # the window's drift alone stops nothing
    with pytest.raises(gate().DriftError):
        gate().enforce(result, "stop")


def test_a_window_of_one_older_span_is_the_previous_span_alone():
    result = gate().compare_spans(newest_two(CONFIG.data.input_base), SCHEMA,
                                  *settings(span_window=2))
    assert result["window"] is None


def test_a_regression_label_is_read_and_compared_as_a_number(tmp_path):
    from core.config import load_config
    from tests.helpers import write_config

    features, drifted = CONFIG.features, drifted_feature()
    config = load_config(write_config(tmp_path / "config", {  # the drifted column is the label
        "task.kind": "regression", "features.label": drifted,
        "features.numeric": [n for n in features.numeric if n != drifted],
        "features.categorical": [*features.categorical, features.label],
        "evaluation.thresholds": {"MeanAbsoluteError": {"upper_bound": 500}}}))
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20991231")
    result = gate().compare_spans(newest_two(data), SCHEMA, config.reader_settings,
                                  config.drift_thresholds())
    label = {f["feature"]: f for f in result["features"]}[drifted]
    assert label["measure"] == gate().JSD and label["drifted"]


def test_a_span_file_without_rows_stops_with_the_readers_error_naming_it(tmp_path):
    """The span's statistics come from the pipeline's own reader, which refuses a header-only
    file by name (a span's table then always has rows to measure)."""
    from components.drift_gate.executor import span_statistics

    [first, *_] = span_files(newest_span(CONFIG.data.input_base))
    empty = tmp_path / "span-20991231" / first.name
    empty.parent.mkdir()
    empty.write_text(first.read_text().splitlines()[0] + "\n")
    with pytest.raises(reader().DataError, match=f"{empty} has a header but no rows"):
        span_statistics([str(empty)], CONFIG.reader_settings)
    assert span_statistics([str(first)], CONFIG.reader_settings).datasets[0].num_examples == len(
        first.read_text().splitlines()) - 1
