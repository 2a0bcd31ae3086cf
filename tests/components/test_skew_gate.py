"""The skew check on real spans with real TFDV (configs/recommender.yaml's kinds): two bundled
click spans are the training window, requests made from the third span's rows (the `retrieve`
signature's inputs, no label, written by core/serving_log.span_rows) are the serving span.
Unshifted requests pass; each planted skew is named by its own rule, and only there."""
from __future__ import annotations

import csv
import itertools
import shutil

import pytest

from tests.helpers import REPO

CONFIG_PATH = REPO / "configs" / "recommender.yaml"
ROWS = 3000
DAY = "span-20991231"


def skew():
    """Imported when a test runs, not at collection (tests/README.md)."""
    from components.skew_gate import component

    return component


@pytest.fixture(scope="module")
def clicks(tmp_path_factory):
    """(config, training folder of the first two spans, the third span's rows as dicts)."""
    from core.config import load_config

    config = load_config(CONFIG_PATH)
    folder = tmp_path_factory.mktemp("click_spans")
    *trained, held_out = sorted(p for p in config.data.input_base.iterdir() if p.is_dir())
    for span in trained:
        (folder / span.name).mkdir()
        for path in span.glob("*.csv"):
            lines = path.read_text().splitlines(keepends=True)[:ROWS + 1]
            (folder / span.name / path.name).write_text("".join(lines))
    with open(next(held_out.glob("*.csv")), newline="") as f:
        rows = list(itertools.islice(csv.DictReader(f), ROWS))
    return config, folder, rows


def requests(config, rows, **changes):
    """The rows as the endpoint logs `retrieve` requests (core/serving_log.py's records);
    changes: feature -> function of the row's value."""
    from core.serving_log import signature_inputs

    inputs = signature_inputs(config, "retrieve")
    separator = config.data.list_separator
    records = []
    for row in rows:
        features = {}
        for name in inputs:
            value = row[name]
            if name in config.features.lists:
                value = [v for v in value.split(separator) if v]
            elif name in config.features.numeric:
                value = float(value) if value not in config.data.null_markers else None
            features[name] = changes.get(name, lambda v: v)(value)
        records.append({"features": features})
    return inputs, records


def serve(tmp_path, config, rows, **changes):
    """A serving span of the rows (with changes) under tmp_path/requests; its folder."""
    from core.serving_log import span_rows

    inputs, records = requests(config, rows, **changes)
    base = tmp_path / "requests"
    (base / DAY).mkdir(parents=True)
    (base / DAY / "requests-0.csv").write_text(span_rows(
        records, inputs, list(config.features.lists), config.data.list_separator,
        config.data.null_markers[0]))
    return base


def check(config, folder, serving_base, **settings):
    import tensorflow_data_validation as tfdv

    from components.example_gen.csv_reader import files_in_window
    from components.span_statistics import span_statistics

    training = files_in_window(str(folder), config.data.file_pattern, 10 ** 6, 3)
    schema = tfdv.infer_schema(span_statistics(
        [f for paths in training.values() for f in paths], config.reader_settings))
    return skew().compare(training, str(serving_base), schema,
                          {**skew().skew_settings(config), **settings})


def skewed(result):
    return {(f["feature"], f["measure"]) for f in result["features"] if f["skewed"]}


def test_unshifted_requests_pass_and_every_served_input_is_measured(clicks, tmp_path):
    config, folder, rows = clicks
    result = check(config, folder, serve(tmp_path, config, rows))
    assert result["serving_span"] == "2099-12-31"
    assert result["training_spans"] == ["2024-01-01", "2024-01-02"]
    assert result["rows"] == {"training": 2 * ROWS, "serving": ROWS}
    # item_id is retrieve's candidate: never in a request, never missing.
    assert {(f["feature"], f["measure"]) for f in result["features"]} == {
        ("hour", "Jensen-Shannon divergence"),
        ("device", "L-infinity distance"), ("user_click_history", "L-infinity distance"),
        ("user_click_history", "mean list length")}
    assert all(f["distance"] is not None for f in result["features"])
    assert not result["skewed"] and skewed(result) == set()
    assert result["missing"] == [] and result["unseen"] == [] and result["note"] == ""
    skew().enforce(result, "stop")


def test_hour_always_3_is_skewed_by_jensen_shannon_and_comes_first(clicks, tmp_path):
    config, folder, rows = clicks
    result = check(config, folder, serve(tmp_path, config, rows, hour=lambda v: 3.0))
    assert skewed(result) == {("hour", "Jensen-Shannon divergence")}
    assert result["features"][0]["feature"] == "hour"
    assert result["missing"] == [] and result["unseen"] == [] and result["skewed"]


def test_a_device_training_never_had_is_unseen(clicks, tmp_path):
    config, folder, rows = clicks
    every_third = iter(range(len(rows)))
    result = check(config, folder, serve(
        tmp_path, config, rows,
        device=lambda v: "smart_tv" if next(every_third) % 3 == 0 else v))
    assert result["unseen"] == [{"feature": "device", "values": ["smart_tv"], "count": ROWS // 3}]
    assert {name for name, _ in skewed(result)} <= {"device"} and result["skewed"]
    assert result["missing"] == []


def test_histories_cut_to_one_item_are_skewed_by_their_length(clicks, tmp_path):
    config, folder, rows = clicks
    result = check(config, folder, serve(tmp_path, config, rows,
                                         user_click_history=lambda v: v[-1:]))
    assert ("user_click_history", "mean list length") in skewed(result)
    assert {name for name, _ in skewed(result)} == {"user_click_history"}
    length = next(f for f in result["features"] if f["measure"] == "mean list length")
    assert length["serving"] == pytest.approx(1.0, abs=0.05) and length["training"] > 2
    assert result["missing"] == [] and result["unseen"] == []


def test_a_history_always_empty_is_missing_at_serving(clicks, tmp_path):
    config, folder, rows = clicks
    result = check(config, folder, serve(tmp_path, config, rows,
                                         user_click_history=lambda v: []))
    [missing] = result["missing"]
    assert missing["feature"] == "user_click_history"
    assert missing["serving_presence"] == 0 and missing["training_presence"] > 0.5
    assert result["skewed"] and result["unseen"] == []


def test_a_field_the_app_stopped_sending_is_missing_at_serving(clicks, tmp_path):
    config, folder, rows = clicks
    result = check(config, folder, serve(tmp_path, config, rows, device=lambda v: None))
    assert result["missing"] == [{"feature": "device", "training_presence": 1.0,
                                  "serving_presence": 0.0}]
    assert result["unseen"] == [] and result["skewed"]


def test_stop_names_each_skewed_feature_and_warn_lets_the_night_go_on(clicks, tmp_path):
    config, folder, rows = clicks
    result = check(config, folder, serve(
        tmp_path, config, rows, hour=lambda v: 3.0, device=lambda v: "smart_tv",
        user_click_history=lambda v: []))
    skew().enforce(result, "warn")
    with pytest.raises(skew().SkewError) as stopped:
        skew().enforce(result, "stop")
    message = str(stopped.value)
    assert message.startswith("serving span 2099-12-31 is skewed from the training spans "
                              "2024-01-01, 2024-01-02: ")
    assert "'hour' Jensen-Shannon divergence" in message
    assert "'device' L-infinity distance 1.000 > threshold 0.25" in message
    assert "'user_click_history' mean list length 0.00 at serving, " in message
    assert "'user_click_history' missing at serving (in 0% of rows" in message
    assert "'device' has values training never had: smart_tv (3000 rows)" in message
    assert "skew.on_skew: warn" in message and "Nothing was pushed" in message


def test_no_serving_span_with_enough_rows_is_a_note_and_passes(clicks, tmp_path):
    config, folder, rows = clicks
    result = check(config, folder, tmp_path / "nothing-here")
    assert result["serving_span"] is None and result["features"] == []
    assert result["note"].startswith(f"No serving span under {tmp_path / 'nothing-here'}")
    assert not result["skewed"]
    skew().enforce(result, "stop")
    # A span with too few rows (a day just begun) is skipped too.
    few = check(config, folder, serve(tmp_path, config, rows[:50]), min_rows=100)
    assert few["serving_span"] is None and "nothing to compare" in few["note"]


def test_a_serving_span_that_holds_the_label_is_refused_by_the_reader(clicks, tmp_path):
    """A training file copied among the requests: the label is not a serving column, so the
    reader refuses it, and the result says so (nothing compared) instead of failing the night."""
    config, folder, rows = clicks
    base = tmp_path / "requests"
    (base / DAY).mkdir(parents=True)
    shutil.copy(next((folder / "span-20240101").glob("*.csv")), base / DAY / "clicks.csv")
    result = check(config, folder, base)
    assert "could not be read" in result["note"] and "unexpected column" in result["note"]
    assert result["serving_span"] is None and not result["skewed"]


def test_the_config_gives_every_model_input_a_threshold_and_refuses_unknown_ones():
    from core.config import ConfigError, load_config

    config = load_config(CONFIG_PATH, {"skew.thresholds": {"hour": 0.5}})
    assert config.skew_thresholds() == {"hour": 0.5, "device": 0.25, "item_id": 0.25,
                                        "user_click_history": 0.25}
    assert config.skew.on_skew == "warn"
    assert config.serving_base == str(config.runner.output_dir / "requests")
    with pytest.raises(ConfigError, match=r"skew.thresholds names \['clicked'\]"):
        load_config(CONFIG_PATH, {"skew.thresholds": {"clicked": 0.5}})
    with pytest.raises(ConfigError, match="skew"):
        load_config(CONFIG_PATH, {"skew.on_skew": "stall"})


def test_a_span_of_two_signatures_is_read_by_the_columns_with_the_most_rows(clicks, tmp_path):
    from core.serving_log import span_rows

    config, folder, rows = clicks
    base = serve(tmp_path, config, rows)
    inputs = list(config.features.model_inputs)  # serving_default's: the candidate too
    (base / DAY / "serving_default-p0-o0.csv").write_text(span_rows(
        [{"features": {name: row[name] for name in inputs}} for row in rows[:200]], inputs,
        [], config.data.list_separator, config.data.null_markers[0]))
    result = check(config, folder, base)
    assert result["rows"]["serving"] == ROWS and not result["skewed"]


def test_the_step_measures_the_window_ending_at_example_gens_span_and_the_gate_reads_it(
        clicks, tmp_path):
    """skew_check and skew_gate as the steps call them: ExampleGen's span property, the schema
    artifact's file, skew.json in the output artifact, the gate reading it back."""
    import json

    import tensorflow_data_validation as tfdv
    from tfx.types import standard_artifacts

    from components.span_statistics import span_statistics

    config, folder, rows = clicks
    examples = standard_artifacts.Examples()
    examples.set_int_custom_property("span", 19724)  # 2024-01-02: the window holds both spans
    first = standard_artifacts.Examples()
    first.set_int_custom_property("span", 19723)  # 2024-01-01: only the first
    schema = standard_artifacts.Schema()
    schema.uri = str(tmp_path / "schema")
    (tmp_path / "schema").mkdir()
    tfdv.write_schema_text(tfdv.infer_schema(span_statistics(
        [str(p) for p in folder.glob("*/*.csv")], config.reader_settings)),
        str(tmp_path / "schema" / "schema.pbtxt"))
    base = serve(tmp_path, config, rows, hour=lambda v: 3.0)
    settings = json.dumps({**skew().skew_settings(config), "code_fingerprint": "x"})
    results = {}
    for name, artifact in (("both", examples), ("first", first)):
        out = standard_artifacts.ExampleAnomalies()
        out.uri = str(tmp_path / name)
        skew().skew_check(artifact, schema, out, str(folder), str(base), settings)
        results[name] = out
    both = skew().read_result(results["both"].uri)
    assert both["training_spans"] == ["2024-01-01", "2024-01-02"]
    assert both["serving_span"] == "2099-12-31" and both["skewed"]
    assert skew().read_result(results["first"].uri)["training_spans"] == ["2024-01-01"]
    skew().skew_gate(results["both"], "warn")
    with pytest.raises(skew().SkewError, match="'hour' Jensen-Shannon divergence"):
        skew().skew_gate(results["both"], "stop")


def test_an_unreadable_serving_file_is_a_note_not_a_failed_night(clicks, tmp_path):
    """The serving span is monitoring: a file the reader refuses (not the sink's: it checks
    every record) leaves the night running, the reason in the report."""
    config, folder, rows = clicks
    base = serve(tmp_path, config, rows)
    (base / DAY / "zz-foreign.csv").write_bytes(b"hour,device\n\xff\xfe,mobile\n" * 200)
    result = check(config, folder, base)
    assert result["serving_span"] is None and not result["skewed"]
    assert "could not be read" in result["note"] and "zz-foreign.csv" in result["note"]
    skew().enforce(result, "stop")


def test_new_requests_change_the_digest_a_local_run_gives_skew_check(clicks, tmp_path):
    """A step's cache key covers its inputs and settings only: the serving spans' digest in
    SkewCheck's settings (pipeline/run.py) is what re-runs it when requests arrived and the
    training data did not change."""
    config, folder, rows = clicks
    fingerprint = skew().spans_fingerprint
    pattern = config.data.file_pattern
    empty = fingerprint(str(tmp_path / "requests"), pattern)
    base = serve(tmp_path, config, rows[:50])
    first = fingerprint(str(base), pattern)
    assert first != empty and fingerprint(str(base), pattern) == first
    (base / DAY / "requests-1.csv").write_text((base / DAY / "requests-0.csv").read_text())
    assert fingerprint(str(base), pattern) not in (first, empty)
