"""The bundled night compiled for Kubeflow with `kubeflow.beam_args` pointing at a Beam job
server, as deploy/flink/README.md sets it, run through the local KFP backend (the driver and
launcher of KFP 2.17.0, the newest emulated) from the emulated step image, its Beam steps on the
local Flink cluster of `make flink-up` (the `flink` fixture: each TaskManager with its own
worker pool, as the operator's TaskManager pods with their sidecar)."""
from __future__ import annotations

import json
import re

import pytest

from devtools import flink_cluster, netns
from tests.helpers import REPO, kubeflow_local_changes, run_cli, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3000),
              pytest.mark.skipif(bool(flink_cluster.jar_problem() or netns.available()),
                                 reason=str(flink_cluster.jar_problem() or netns.available()))]
TAG = "2.17.0"


def test_the_compiled_night_runs_its_beam_steps_on_the_cluster(step_image, flink, tmp_path):
    from core.config import load_config
    from devtools.kfp_backend import step_server

    beam_args = json.loads(flink.beam_args.read_text())
    data = load_config(REPO / "configs" / "pipeline.yaml").data.input_base
    config_path = write_config(tmp_path, {**kubeflow_local_changes(tmp_path, data),
                                          "kubeflow.beam_args": beam_args})
    config = load_config(config_path)
    compiled = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config_path))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    spec = tmp_path / "spec" / f"{config.pipeline_name}.yaml"
    assert all(arg in spec.read_text() for arg in beam_args)
    with step_server(json.loads((step_image / "image.json").read_text()),
                     tmp_path / "prefork") as steps:
        steps.wait_ready(timeout=600)
        result = run_cli("devtools.kfp_backend", str(spec), "--backend-version", TAG,
                         "--pipeline-root", str(tmp_path / "root"), "--state",
                         str(tmp_path / "state"), "--image", str(step_image),
                         "--prefork-socket", steps.socket_path, timeout=2400)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    tasks = json.loads(open(found.group(1)).read())["tasks"]
    assert {name for name, task in tasks.items() if task.get("status") != "ran"} == set()
    assert len(list((tmp_path / "serving" / config.serving.model_name).iterdir())) == 1
    # Every Beam step ran as a Flink job of the cluster, and both TaskManagers' pools worked.
    assert {name: job["state"] for name, job in flink.jobs().items()} == {
        f"{config.pipeline_name}-{step}": "FINISHED"
        for step in ("csvexamplegen", "statisticsgen", "transform", "evaluator")}
    assert all(started > 0 for started in flink.workers_started().values())
