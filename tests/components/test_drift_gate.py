"""The drift gate on real spans with real TFDV: the bundled spans do not drift, a span whose
penguins weigh 900 g more does (in body_mass_g only), and the pipeline's choice decides."""
from __future__ import annotations

import pytest
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from components.csv_example_gen import files_in_window
from components.drift_gate import JSD, L_INF, DriftError, compare_spans, enforce
from pipeline.config import load_config
from tests.helpers import REPO, add_drifted_span, copy_spans

CONFIG = load_config(REPO / "configs" / "pipeline.yaml")
SCHEMA = text_format.Parse((REPO / "configs" / "schema.pbtxt").read_text(), schema_pb2.Schema())


def settings() -> dict:
    return {"features": CONFIG.features.model_dump(mode="json"),
            "null_markers": CONFIG.data.null_markers, "file_pattern": CONFIG.data.file_pattern,
            "thresholds": CONFIG.drift_thresholds()}


def newest_two(data) -> dict:
    return files_in_window(str(data), CONFIG.data.file_pattern, 10 ** 6, 2)


def test_the_bundled_spans_do_not_drift():
    result = compare_spans(newest_two(REPO / "data" / "penguins"), SCHEMA, settings())
    assert (result["newest_span"], result["previous_span"]) == ("2009-12-31", "2008-12-31")
    by_feature = {f["feature"]: f for f in result["features"]}
    assert set(by_feature) == {"species", "island", "sex", "bill_length_mm", "bill_depth_mm",
                               "flipper_length_mm", "body_mass_g"}
    assert by_feature["body_mass_g"]["measure"] == JSD
    assert by_feature["island"]["measure"] == L_INF
    assert all(f["distance"] is not None and not f["drifted"] for f in result["features"])
    enforce(result, "stop")  # nothing to stop


def test_a_heavier_span_drifts_in_body_mass_only_and_stops_the_run(tmp_path):
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20101231")
    result = compare_spans(newest_two(data), SCHEMA, settings())
    drifted = [f for f in result["features"] if f["drifted"]]
    assert [f["feature"] for f in drifted] == ["body_mass_g"]
    assert drifted[0]["distance"] > CONFIG.drift.numeric_threshold
    with pytest.raises(DriftError) as stopped:
        enforce(result, "stop")
    message = str(stopped.value)
    assert message.startswith("span 2010-12-31 drifted from span 2009-12-31 in 1 feature(s): "
                              "'body_mass_g' Jensen-Shannon divergence 0.")
    assert "drift.thresholds" in message and "Nothing was pushed" in message


def test_warn_lets_a_drifted_span_through(tmp_path):
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20101231")
    result = compare_spans(newest_two(data), SCHEMA, settings())
    assert any(f["drifted"] for f in result["features"])
    enforce(result, "warn")  # recorded for the report, not raised


def test_one_span_has_nothing_to_compare(tmp_path):
    data = tmp_path / "data"
    (data / "span-20091231").mkdir(parents=True)
    (data / "span-20091231" / "penguins.csv").write_text(
        (REPO / "data" / "penguins" / "span-20091231" / "penguins.csv").read_text())
    result = compare_spans(newest_two(data), SCHEMA, settings())
    assert result["features"] == [] and "nothing to compare" in result["note"]


def window_of_three(data) -> dict:
    return files_in_window(str(data), CONFIG.data.file_pattern, 10 ** 6, 3)


def test_the_newest_span_is_also_measured_against_the_training_window(tmp_path):
    bundled = compare_spans(window_of_three(REPO / "data" / "penguins"), SCHEMA,
                            {**settings(), "span_window": 3})
    assert bundled["window"]["spans"] == ["2007-12-31", "2008-12-31"]
    assert {f["feature"] for f in bundled["window"]["features"]} == {
        f["feature"] for f in bundled["features"]}
    assert not any(f["drifted"] for f in bundled["window"]["features"])
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20101231")
    heavier = compare_spans(window_of_three(data), SCHEMA, {**settings(), "span_window": 3})
    assert heavier["window"]["spans"] == ["2008-12-31", "2009-12-31"]
    assert [f["feature"] for f in heavier["window"]["features"] if f["drifted"]] == [
        "body_mass_g"]


def test_the_training_window_is_reported_not_a_gate(tmp_path):
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20101231")
    result = compare_spans(window_of_three(data), SCHEMA, {**settings(), "span_window": 3})
    only_the_window = {**result, "features": [{**f, "drifted": False}
                                              for f in result["features"]]}
    enforce(only_the_window, "stop")  # the window's drift alone stops nothing
    with pytest.raises(DriftError):
        enforce(result, "stop")


def test_a_window_of_one_older_span_is_the_previous_span_alone():
    result = compare_spans(newest_two(REPO / "data" / "penguins"), SCHEMA,
                           {**settings(), "span_window": 2})
    assert result["window"] is None


def test_a_regression_label_is_read_and_compared_as_a_number(tmp_path):
    from tests.helpers import write_config

    config = load_config(write_config(tmp_path / "config", {
        "task.kind": "regression", "features.label": "body_mass_g",
        "features.numeric": ["bill_length_mm", "bill_depth_mm", "flipper_length_mm"],
        "features.categorical": ["island", "sex", "species"],
        "evaluation.thresholds": {"MeanAbsoluteError": {"upper_bound": 500}}}))
    data = copy_spans(tmp_path)
    add_drifted_span(data, "span-20101231")
    result = compare_spans(newest_two(data), SCHEMA, {
        "features": config.reader_features, "null_markers": config.data.null_markers,
        "file_pattern": config.data.file_pattern, "thresholds": config.drift_thresholds()})
    label = {f["feature"]: f for f in result["features"]}["body_mass_g"]
    assert label["measure"] == JSD and label["drifted"]
