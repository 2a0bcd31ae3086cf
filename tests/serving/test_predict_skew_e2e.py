"""Issue 45, item 4, for the tabular example: skew planted in what the predict client sends is
found by the next night. The training window's own rows, one numeric feature moved out of its
training range, go to the pushed model through `python -m pipeline.predict --log-requests DIR`;
the next night on the shared pushed run (its metadata copied), its skew check reading DIR and
on_skew stop, fails at SkewGate naming exactly that feature. The example's names come from its
config (helpers.example_config()), so the test holds in a fork."""
from __future__ import annotations

import csv
import json
import re

from tests.helpers import example_config, run_cli, write_config


def shifted_rows(config, path, feature: str) -> None:
    """The training window's rows as they are, `feature` moved past its largest value by ten
    times its range (an absent cell stays absent)."""
    from components.example_gen.csv_reader import files_in_window

    data = config.data
    files = [f for span in files_in_window(str(data.input_base), data.file_pattern, 10 ** 9,
                                           data.span_window).values() for f in span]
    rows, header = [], None
    for name in files:
        with open(name, newline="") as f:
            reader = csv.DictReader(f)
            header = header or reader.fieldnames
            rows.extend(reader)
    values = [float(r[feature]) for r in rows if r[feature] not in data.null_markers]
    move = max(values) + 10 * (max(values) - min(values))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        for row in rows:
            if row[feature] not in data.null_markers:
                row[feature] = f"{float(row[feature]) + move:g}"
            writer.writerow(row)


def test_a_numeric_feature_shifted_at_the_predict_client_stops_the_next_night(pushed_run,
                                                                             tmp_path):
    from devtools.tf_serving.rest_stub import RestStub
    from devtools.tf_serving.session_model import SessionModel
    from pipeline import predict

    config = example_config()
    feature = config.features.numeric[0]
    rows, logged = tmp_path / "rows.csv", tmp_path / "requests"
    shifted_rows(config, rows, feature)
    model = SessionModel(pushed_run.version_dir)
    with RestStub(config.serving.model_name, model.predict_instances) as stub:
        assert predict.main(["--config", str(pushed_run.config_path), "--url", stub.url,
                             "--csv", str(rows), "--batching-config", "none",
                             "--log-requests", str(logged)]) == 0
    assert list(logged.glob("span-*/predict-*.csv"))

    night = tmp_path / "night"
    pushed_run.copy_metadata(night / "outputs")
    path = write_config(night, {"skew.serving_base": str(logged), "skew.on_skew": "stop"})
    result = run_cli("pipeline.run", "--runner", "local", "--config", str(path))
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    messages = [line for line in output.splitlines() if "is skewed from the training" in line]
    assert messages, output[-3000:]
    for message in messages:  # the console's line, and the log's
        assert set(re.findall(r"'([A-Za-z0-9_.-]+)'", message)) == {feature}, message
    [skew_file] = (night / "outputs").rglob("skew.json")
    skew = json.loads(skew_file.read_text())
    assert [f["feature"] for f in skew["features"] if f["skewed"]] == [feature], skew
    assert skew["features"][0]["feature"] == feature  # worst first
    assert skew["missing"] == [] and skew["unseen"] == [], skew
    [report] = (night / "outputs" / "reports").glob("run-*/report.md")
    [line] = [line for line in report.read_text().splitlines() if "Serving skew:" in line]
    assert f"1 feature(s) beyond the threshold: {feature} (" in line, line
