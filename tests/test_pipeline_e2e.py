"""The real pipeline end to end on the bundled data (TFX LocalDagRunner, Beam DirectRunner)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import (REPO, add_anomalous_span, add_changed_span, anomalous_feature,
                           example_config, example_data, newest_span, report_path, run_cli,
                           span_files, tree_digest, versions, write_config)

pytestmark = pytest.mark.e2e

# Names from the bundled config; the example's own answers are tests/example's.
CONFIG = example_config()
FEATURES = CONFIG.reader_features


def summary_list(output: str, key: str) -> list:
    """The steps the run summary lists after `  <key>:` ("ran", "from cache")."""
    line = next(line for line in output.splitlines() if line.startswith(f"  {key}:"))
    return line.split(":", 1)[1].strip().split(", ")


def test_first_run_pushes_a_model_that_answers_both_signatures(pushed_run):
    import tensorflow as tf
    from components.example_gen.csv_reader import parse_csv

    assert "blessed:    yes" in pushed_run.output
    assert f"pushed:     {pushed_run.version_dir}" in pushed_run.output
    model = tf.saved_model.load(str(pushed_run.version_dir))
    [span] = span_files(newest_span(example_data()))
    rows = "\n".join(span.read_text().splitlines()[:21]) + "\n"  # the header and 20 rows
    examples = list(parse_csv(str(span), rows, FEATURES, CONFIG.data.null_markers))
    answer = model.signatures["serving_default"](
        examples=tf.constant([e.SerializeToString() for e in examples]))
    np.testing.assert_allclose(answer["probabilities"].numpy().sum(axis=1), 1.0, rtol=1e-5)
    # raw_features, one tensor per model input, answers as serving_default for the same rows.
    raw = {name: [] for name in CONFIG.features.model_inputs}
    for example in examples:
        for name in CONFIG.features.numeric:
            raw[name].append(list(example.features.feature[name].float_list.value or [np.nan])[0])
        for name in CONFIG.features.categorical:
            raw[name].append(list(example.features.feature[name].bytes_list.value or [b""])[0])
    by_name = model.signatures["raw_features"](**{n: tf.constant(v) for n, v in raw.items()})
    assert list(by_name["class_name"].numpy()) == list(answer["class_name"].numpy())
    np.testing.assert_allclose(by_name["probabilities"].numpy(), answer["probabilities"].numpy(),
                               atol=1e-5)
    assert (pushed_run.version_dir / "assets.extra" / "tf_serving_warmup_requests").is_file()


def test_unchanged_rerun_is_served_from_cache_and_pushes_nothing(pushed_run):
    before = versions(pushed_run.model_base_path)
    result = run_cli("pipeline.run", "--config", str(pushed_run.config_path))
    assert result.returncode == 0, result.stderr
    assert "  ran:        -" in result.stdout
    # Every step the first run ran is now from cache: a progress parser that matched nothing
    # would also print "ran: -", but with nothing from cache.
    first_ran = summary_list(pushed_run.output, "ran")
    assert {"CsvExampleGen", "Trainer", "Pusher"} <= set(first_ran)
    assert sorted(summary_list(result.stdout, "from cache")) == sorted(first_ran)
    assert "pushed:     nothing new" in result.stdout
    assert "  data:       no new span since the last run" in result.stdout
    assert "no new span" not in pushed_run.output
    assert versions(pushed_run.model_base_path) == before
    # ServingBaseline and Evaluator come from the first run's cache, when nothing served yet.
    assert "none serving yet" not in result.stdout
    assert f"v{before[-1]} serves now" in result.stdout


def test_a_worse_model_is_refused_against_the_serving_one_and_serving_is_untouched(pushed_run):
    """3 training steps (seeded: accuracy 0.82 against the served model's 0.98) under a lower
    bound it passes: only the comparison with the model that serves now can refuse it."""
    before = tree_digest(pushed_run.model_base_path)
    worse = write_config(pushed_run.folder, {
        "training.train_steps": 3,
        "evaluation.thresholds": {"SparseCategoricalAccuracy": {"lower_bound": 0.5,
                                                                "max_decrease": 0.01}}},
        name="worse.yaml")
    result = run_cli("pipeline.run", "--config", str(worse))
    assert result.returncode == 0, result.stderr
    assert f"baseline v{versions(pushed_run.model_base_path)[-1]}" in result.stdout
    assert "blessed:    no" in result.stdout
    failures = [line.strip() for line in result.stdout.split("blessed:    no")[1].splitlines()
                if line.startswith("    - ")]
    assert failures, result.stdout
    for failure in failures:  # threshold_slices: overall (the default)
        assert failure.startswith(
            "- sparse_categorical_accuracy (change vs baseline) on Overall = -"), failure
    assert "pushed:     nothing: the model was not blessed" in result.stdout
    assert tree_digest(pushed_run.model_base_path) == before
    # The report of a refused run says why in one sentence, the failed bound marked FAIL.
    report = (report_path(result.stdout).parent / "report.md").read_text()
    assert "**Not blessed: 1 threshold(s) failed (sparse_categorical_accuracy (change vs " \
        "baseline) on Overall = -" in report
    assert "| sparse_categorical_accuracy | change vs serving at least -0.01 | -" in report
    assert "| FAIL |" in report and "| at least 0.5 |" in report


def test_make_schema_writes_the_inferred_schema_beside_the_config(pushed_run):
    from tensorflow_metadata.proto.v0 import schema_pb2
    from google.protobuf import text_format

    # The command the Makefile's `schema` target runs (-n: printed, venv set-up not run).
    dry_run = subprocess.run(["make", "-n", "schema", f"CONFIG={pushed_run.config_path}"],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout
    [command] = [line for line in dry_run.splitlines() if "pipeline.schema" in line]
    written = pushed_run.config_path.parent / "schema.pbtxt"
    result = subprocess.run(command, shell=True, cwd=REPO, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr
    assert f"wrote the inferred schema to {written}" in result.stdout
    schema = text_format.Parse(written.read_text(), schema_pb2.Schema())
    assert {f.name for f in schema.feature} >= {CONFIG.features.label,
                                                *CONFIG.features.model_inputs}


# One reader error and one gate stop, end to end through the CLI: every other reader error takes
# the same path and has its message checked in tests/components/test_csv_example_gen.py.
# Each a span of the newest bundled span's rows: the first row's last numeric cell is text, or
# every row has a category the schema does not know.
NUMERIC = CONFIG.features.numeric[-1]
BAD_DATA = {
    "text_in_numeric": (
        lambda data, source: add_changed_span(
            data, "span-20240101", NUMERIC, lambda cells: ["long", *cells[1:]], source),
        f"line 2, column '{NUMERIC}': 'long' is not a number"),
    "unseen_category": (
        lambda data, source: add_anomalous_span(data, "span-20240101", source),
        f"feature '{anomalous_feature()}': ENUM_TYPE_UNEXPECTED_STRING_VALUES"),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_stops_with_a_clear_error_and_pushes_nothing(pushed_run, tmp_path, case):
    write_span, expected = BAD_DATA[case]
    [source] = span_files(newest_span(example_data()))
    path = write_span(tmp_path / "data", source)
    serving = tmp_path / "serving"
    shutil.copytree(pushed_run.model_base_path.parent, serving)
    before = tree_digest(serving)
    config = write_config(tmp_path, {"serving.serving_dir": str(serving)},
                          data_dir=tmp_path / "data")
    result = run_cli("pipeline.run", "--config", str(config))
    assert result.returncode == 1
    error_line = result.stderr.strip().splitlines()[0]
    assert error_line.startswith("error: ")
    assert expected in result.stderr
    if case != "unseen_category":
        assert str(path) in error_line
    assert tree_digest(serving) == before
    assert "Traceback" not in result.stderr  # the traceback goes to the log file
    # A stopped run has its report too, which names the step that stopped it.
    report = (report_path(result.stdout).parent / "report.md").read_text()
    assert "**Not evaluated: the run stopped at " in report and expected in report
    log_file = Path(result.stderr.split("(traceback in ")[1].split(")")[0])
    assert log_file.parent == tmp_path / "outputs" / "logs"
    log = log_file.read_text()
    assert "Traceback (most recent call last)" in log and expected in log
