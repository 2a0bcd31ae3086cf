"""A Kubeflow night that fails tells someone: the bundled config compiled as `--runner kubeflow`
compiles it (its webhook URL from a Kubernetes Secret), whose newest span holds a value the
schema does not know, run through the local KFP backend (devtools/kfp_backend, KFP 2.17.0) from
the emulated step image on local paths. The anomaly gate fails the night; the exit step still
runs (exit_handler.py), writes the report saying which step failed and posts one message to a
webhook on loopback. The emulation's own negative control (no trigger policy, no exit step after a
failure) is in test_exit_handler.py.
"""
from __future__ import annotations

import json
import re

import pytest

from tests.helpers import (add_anomalous_span, copy_spans, dump_yaml, kubeflow_local_changes,
                           run_cli, write_config)
from tests.pipeline.test_notify import webhook  # noqa: F401  (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3000)]
TAG = "2.17.0"
SECRET = "night-webhook"


def test_a_night_its_gate_fails_ends_with_a_report_naming_the_step_and_a_message(
        step_image, tmp_path, webhook):  # noqa: F811
    from core.config import load_config
    from devtools.kfp_backend import step_server

    url, handler = webhook
    data = copy_spans(tmp_path)
    add_anomalous_span(data, "span-20101231")
    config_path = write_config(tmp_path, {**kubeflow_local_changes(tmp_path, data),
                                          "notify.kubeflow_secret": SECRET}, data_dir=data)
    config = load_config(config_path)
    compiled = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config_path))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    spec = tmp_path / "spec" / f"{config.pipeline_name}.yaml"
    assert url not in spec.read_text()
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(dump_yaml({"apiVersion": "v1", "kind": "Secret",
                                       "metadata": {"name": SECRET},
                                       "stringData": {"url": url}}))
    with step_server(json.loads((step_image / "image.json").read_text()),
                     tmp_path / "prefork") as steps:
        steps.wait_ready(timeout=600)
        result = run_cli("devtools.kfp_backend", str(spec), "--backend-version", TAG,
                         "--pipeline-root", str(tmp_path / "root"),
                         "--state", str(tmp_path / "state"), "--image", str(step_image),
                         "--secrets", str(secrets), "--prefork-socket", steps.socket_path,
                         timeout=2400)
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    record = json.loads(open(found.group(1)).read())
    tasks = record["tasks"]
    assert result.returncode == 1
    assert tasks["AnomalyGate"]["status"] == "failed"
    assert tasks["Pusher"]["status"] == tasks["RunReport"]["status"] == "not run"
    assert tasks["RunExit"]["status"] == "ran", (tasks["RunExit"], result.stdout[-2000:])
    markdown = open(tasks["RunExit"]["artifacts"]["markdown"]["uri"]).read()
    assert "the run stopped at AnomalyGate" in markdown
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in markdown
    # What the steps that ran recorded, read by the run report's reader: the spans, the anomalies.
    assert "- span 2010-12-31:" in markdown  # the anomalous span, read by CsvExampleGen
    assert re.search(r"Anomalies: 2: \S+ ENUM_TYPE_UNEXPECTED_STRING_VALUES", markdown)
    assert "<html" in open(tasks["RunExit"]["artifacts"]["html"]["uri"]).read()
    [(_, content_type, body)] = handler.received
    assert content_type == "application/json"
    text = json.loads(body)["text"]
    assert text.splitlines()[0] == (f"Pipeline '{config.pipeline_name}' on Kubeflow: nightly run "
                                    "failed at AnomalyGate")
    assert f"run: Kubeflow run {record['run_id']}" in text
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in text
