"""Each entry point as a user's shell starts it: a fresh interpreter whose environment holds PATH,
HOME and LANG only, none of what tests/conftest.py sets for every other child (TF_USE_LEGACY_KERAS,
TF_CPP_MIN_LOG_LEVEL) and no PYTHONPATH. What the console shows is ours: no TensorFlow C++
start-up lines, no libraries' notices; on an error, the first stderr line is the `error:` line.

And the run lock held during a run (core/run_lock.py): a second run started while the first is in
its Trainer is refused with exit 3, naming the holder, and the first still pushes: that run is
the session's first night (`pushed_run`, tests/conftest.py), which every other test reads too.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import (
    REPO,
    example_config,
    example_data,
    kubeflow_local_changes,
    span_files,
    user_env,
    versions,
    write_config,
)

pytestmark = pytest.mark.e2e

# What a user's console must never show: TensorFlow's C++ logging (oneDNN, the CUDA and TensorRT
# probing, plugin registration), Python warnings, and the libraries' logging notices.
NOISE = ("tensorflow/", "cuda", "TensorRT", "oneDNN", "cpu_feature_guard", "Warning:",
         "WARNING:", "python-snappy", "property_predicate")


def user_command(*args: str, timeout: int = 300, cwd: Path = REPO
                 ) -> subprocess.CompletedProcess:
    """`python -m ARGS` in a fresh interpreter with a user's environment."""
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=user_env(),
                          capture_output=True, text=True, timeout=timeout)


def noise(text: str) -> list:
    return [line for line in text.splitlines() if any(mark in line for mark in NOISE)]


def first_line(text: str) -> str:
    return (text.splitlines() or [""])[0]


def test_the_suite_sets_what_a_user_does_not():
    """Why this module builds its own environment."""
    assert os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    assert {"TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL"}.isdisjoint(user_env())


def test_a_local_run_pushes_and_a_second_run_during_its_trainer_is_refused(pushed_run):
    """The session's first night is this run (tests/conftest.py `_run_pipeline`: a user's
    environment, the second run started when the first printed its Trainer line)."""
    record, loaded = pushed_run.record, example_config()
    second = record["second"]
    assert second is not None, "the run ended before its Trainer: " + pushed_run.output
    assert second["returncode"] is not None, \
        "the second run was not refused: it was running beside the first"
    assert second["returncode"] == 3, second["stdout"] + second["stderr"]
    assert second["first_running"], "the first run ended before the second was refused"
    assert first_line(second["stderr"]).startswith(
        f"error: another run of pipeline '{loaded.pipeline_name}' is using "
        f"{pushed_run.folder / 'outputs'} (pid {record['pid']}, started "), second["stderr"]
    assert second["stdout"] == ""
    output, err = pushed_run.output, record["stderr"]
    assert record["returncode"] == 0, output + err
    assert first_line(output).startswith(f"Running pipeline '{loaded.pipeline_name}' locally")
    assert noise(output + err) == [], output + err
    assert err == ""
    assert len(versions(pushed_run.model_base_path)) == 1, output


def test_init_prints_its_own_lines_only(tmp_path):
    [csv_path] = span_files(sorted(p for p in example_data().iterdir() if p.is_dir())[0])
    result = user_command("pipeline.init", "--csv", str(csv_path), "--label",
                          example_config().features.label, "--span", "20261130",
                          "--configs", str(tmp_path / "configs"), "--data", str(tmp_path / "data"),
                          "--outputs", str(tmp_path / "outputs"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr
    assert first_line(result.stdout).startswith(f"{csv_path}: "), result.stdout
    assert "python -m pipeline.run --config" in result.stdout


def test_a_config_error_is_the_first_stderr_line(tmp_path):
    missing = tmp_path / "missing.yaml"
    for args in (("pipeline.run", "--runner", "local", "--config", str(missing)),
                 ("pipeline.predict", "--url", "http://127.0.0.1:9", "--csv",
                  str(tmp_path / "rows.csv"), "--config", str(missing))):
        result = user_command(*args, timeout=120)
        assert result.returncode == 2, result.stdout + result.stderr
        assert first_line(result.stderr).startswith("error: "), result.stderr
        assert str(missing) in first_line(result.stderr)


def test_predict_refuses_a_bad_row_with_its_error_line(tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text("no,such,columns\n1,2,3\n")
    result = user_command("pipeline.predict", "--url", "http://127.0.0.1:9", "--csv", str(rows),
                          timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert first_line(result.stderr).startswith("error: "), result.stderr
    assert noise(result.stderr) == []


def test_kubeflow_compile_and_a_step_through_the_entrypoint(tmp_path):
    config = write_config(tmp_path, kubeflow_local_changes(tmp_path, example_data()))
    compiled = user_command("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert compiled.stderr == "", compiled.stderr
    assert first_line(compiled.stdout).startswith("Compiled pipeline "), compiled.stdout
    spec = tmp_path / "spec" / f"{example_config().pipeline_name}.yaml"
    assert spec.is_file()
    # ExampleGen's driver task, which runs `python -m pipeline.kubeflow.step.entrypoint` as its
    # pod's
    # command: a fresh interpreter (no --prefork) with the pod's environment (PATH, LANG, HOME).
    # The pod runs in its own folder, so its Python finds the project as the image's does, from
    # where it is installed: this checkout (an editable install may point at another one).
    run = user_command("devtools.kfp_backend", str(spec), "--pipeline-root", str(tmp_path / "root"),
                       "--state", str(tmp_path / "state"), "--until", "CsvExampleGenDriver",
                       "--env", f"PYTHONPATH={REPO}")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "✓ CsvExampleGenDriver" in run.stdout and " succeeded" in run.stdout, run.stdout
    [log] = (tmp_path / "state").rglob("CsvExampleGenDriver*/*.log") or [None]
    assert log is not None, sorted(map(str, (tmp_path / "state").rglob("*")))
    assert noise(log.read_text()) == [], log.read_text()


def test_the_tfjob_render_prints_its_yaml_only(tmp_path):
    """pipeline/kubeflow/training_job/render.py: stdout is the manifest, stderr empty (it printed
    google-api-core's FutureWarnings and TensorFlow's CUDA and TensorRT probing before it)."""
    result = user_command("pipeline.kubeflow.training_job.render", "--examples", "/x/examples",
                          "--transform-graph", "/x/transform_graph", "--model", "/x/model",
                          "--model-run", "/x/model_run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr
    # The default operator's job: a Kubeflow Trainer v2 TrainJob (training.operator: trainjob).
    assert first_line(result.stdout) == "apiVersion: trainer.kubeflow.org/v1alpha1", \
        result.stdout
