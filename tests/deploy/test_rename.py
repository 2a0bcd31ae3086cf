"""deploy/serving/rename.py: the model is named in one place, the config, and every serving file
follows it; a renamed copy passes the same real tools as the files themselves."""
from __future__ import annotations

import json
import re

import pytest

from tests.deploy.test_serving_artifacts import (
    MODEL_NAME,
    SERVING,
    compose_command,
    k8s_manifests,
    load_yaml_docs,
    output,
    parse_model_server_config,
    rename_tool,
    run,
    tool,
)
from tests.helpers import kubernetes_validate, load_yaml, write_config

NEW_NAME = "House_Prices.v2"  # upper case, '_' and '.': fine for TF Serving, not for Kubernetes
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def named_files(folder):
    return [p for pattern in rename_tool.RENAMED for p in folder.rglob(pattern)]


def test_the_serving_files_carry_the_configs_model_name(tmp_path):
    assert rename_tool.current_name(SERVING) == MODEL_NAME, \
        "run `make deploy-names`: deploy/serving names another model than the config"
    from core.config import load_config

    serving = load_config().serving
    assert rename_tool.rename(MODEL_NAME, SERVING, tmp_path / "copy", serving.tf_serving_version,
                              serving.canary.model_dump()) == [], \
        "run `make deploy-names`: deploy/serving does not follow the config's serving section"


@pytest.mark.slow
def test_a_renamed_copy_names_only_the_new_model_and_passes_the_same_tools(tmp_path):
    copy = tmp_path / "serving"
    changed = rename_tool.rename(NEW_NAME, SERVING, copy)
    assert {p.name for p in changed} >= {"models.config", "deployment.yaml", "alerts.yml",
                                         "alerts_test.yml", "tf-serving.json"}
    for path in named_files(copy):
        assert not re.search(rf"\b{MODEL_NAME}\b", path.read_text()), path
    models = {c.name: c for c in parse_model_server_config(
        (copy / "config" / "models.config").read_text()).model_config_list.config}
    assert models[NEW_NAME].base_path == f"/models/{NEW_NAME}"
    # Kubernetes: valid objects whose names and instance labels are DNS-1123.
    for root in (copy / "k8s", copy / "k8s" / "s3"):
        proc = kubernetes_validate(k8s_manifests(root))
        assert proc.returncode == 0, output(proc)
        for path in k8s_manifests(root):
            for doc in load_yaml_docs(path):
                assert DNS_1123.match(doc["metadata"]["name"]), doc["metadata"]
                instance = doc["metadata"].get("labels", {}).get("app.kubernetes.io/instance")
                assert instance is None or DNS_LABEL.match(instance), doc["metadata"]
    deployment = load_yaml((copy / "k8s" / "deployment.yaml").read_text())
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"]["path"] == f"/v1/models/{NEW_NAME}"
    # Prometheus: the config, the rules and their unit tests on the renamed series.
    prometheus = copy / "prometheus"
    for command in (["check", "config", "prometheus.yml"], ["check", "rules", "alerts.yml"],
                    ["test", "rules", "alerts_test.yml"]):
        proc = run([tool("promtool"), *command], cwd=prometheus)
        assert proc.returncode == 0, output(proc)
    assert f'model_name="{NEW_NAME}"' in (prometheus / "alerts.yml").read_text()
    proc = run(compose_command() + ["-f", str(copy / "compose" / "docker-compose.yml"),
                                    "config", "-q"])
    assert proc.returncode == 0, output(proc)
    dashboard = json.loads((copy / "grafana" / "dashboards" / "tf-serving.json").read_text())
    assert dashboard["uid"] == "tf-serving-house-prices-v2"


def test_the_command_writes_a_copy_named_from_the_config(tmp_path):
    copy = tmp_path / "serving"
    config = write_config(tmp_path, {"serving.model_name": NEW_NAME})
    assert rename_tool.main(["--config", str(config), "--out", str(copy)]) == 0
    assert rename_tool.current_name(copy) == NEW_NAME
    assert rename_tool.kubernetes_name(NEW_NAME) == "house-prices-v2"


def test_the_serving_files_run_the_configs_tf_serving_version(tmp_path):
    from core.config import load_config

    version = load_config().serving.tf_serving_version
    assert rename_tool.image_tags(SERVING) == {version}, \
        "run `make deploy-names`: deploy/serving runs another TF Serving than the config"
    copy = tmp_path / "serving"
    changed = rename_tool.rename(MODEL_NAME, SERVING, copy, "2.20.0")
    assert rename_tool.image_tags(copy) == {"2.20.0"}
    assert {p.name for p in changed} >= {"deployment.yaml", "docker-compose.yml", "rollout.yaml"}
