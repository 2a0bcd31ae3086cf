"""The recommender's cold night on Kubeflow: configs/recommender.yaml compiled as `--runner
kubeflow` compiles it, and every task run through the local KFP backend (devtools/kfp_backend, the
driver and launcher of KFP 2.17.0, the newest emulated) from the emulated step image, on local
paths as the pods' paths. The night validates the click logs, trains the two towers (fewer steps
than the bundled config: the test checks the wiring, test_recommender_e2e.py the model) and pushes
a SavedModel that serves `retrieve`. The data is the newest bundled span's first ROWS rows: the
wiring, not the model, is what this night checks, and Transform, the statistics and the Evaluator
cost with the rows."""
from __future__ import annotations

import json
import re

import pytest

from tests.helpers import (REPO, kubeflow_local_changes, newest_span, run_cli, span_files,
                           write_config)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3000)]
CONFIG = REPO / "configs" / "recommender.yaml"
TAG = "2.17.0"
ROWS = 6000  # of the newest span's 30,000


@pytest.fixture(scope="module")
def night(step_image, tmp_path_factory):
    from core.config import load_config
    from devtools.kfp_backend import step_server

    folder = tmp_path_factory.mktemp("recommender_night")
    newest = newest_span(load_config(CONFIG).data.input_base)
    [source] = span_files(newest)
    data = folder / "data"
    (data / newest.name).mkdir(parents=True)
    lines = source.read_text().splitlines(keepends=True)
    (data / newest.name / source.name).write_text("".join(lines[:ROWS + 1]))  # with the header
    changes = {**kubeflow_local_changes(folder, data), "data.span_window": 1,
               "training.train_steps": 300, "training.steps_per_epoch": None,
               "evaluation.thresholds.AUC.lower_bound": 0.55}
    config_path = write_config(folder, changes, name="recommender.yaml", source=CONFIG)
    config = load_config(config_path)
    compiled = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config_path))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    spec = folder / "spec" / f"{config.pipeline_name}.yaml"
    with step_server(json.loads((step_image / "image.json").read_text()),
                     folder / "prefork") as steps:
        steps.wait_ready(timeout=600)
        result = run_cli("devtools.kfp_backend", str(spec), "--backend-version", TAG,
                         "--pipeline-root", str(folder / "root"), "--state", str(folder / "state"),
                         "--image", str(step_image), "--prefork-socket", steps.socket_path,
                         timeout=2400)
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    record = json.loads(open(found.group(1)).read()) if found else {}
    return result, record.get("tasks") or {}, folder, config


def test_the_cold_night_runs_every_task_and_pushes(night):
    result, tasks, folder, config = night
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    failed = {name: task.get("status") for name, task in tasks.items()
              if task.get("status") != "ran"}
    assert not failed
    assert {"Transform", "Trainer", "Evaluator", "Pusher"} <= set(tasks)
    versions = list((folder / "serving" / config.serving.model_name).iterdir())
    assert len(versions) == 1


def test_the_pushed_model_serves_retrieve(night):
    from devtools.tf_serving.session_model import SessionModel

    _, _, folder, config = night
    [version] = (folder / "serving" / config.serving.model_name).iterdir()
    model = SessionModel(version)
    answers = model.run("retrieve", {"user_click_history": [["sku1019", ""]], "hour": [9.0],
                                     "device": ["mobile"]})
    assert answers["item_ids"].shape == (1, config.retrieval.k)
