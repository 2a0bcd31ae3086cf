"""The TFJob that runs a multi-worker Trainer on Kubeflow: manifest, launch and wait, hand-off.

No cluster here: the Kubernetes API is a fake that answers as the Training Operator would.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from pipeline.kubeflow import tfjob
from tests.helpers import REPO

TFJOB_SETTINGS = {"workers": 3, "parameter_servers": 2, "cpu": "4", "memory": "8Gi",
                  "gpus_per_worker": 1, "timeout_s": 3600}
ARGS = tfjob.worker_args({"run_fn": "models.model.run_fn"}, "gs://b/examples/1",
                         "gs://b/transform_graph/2", "gs://b/model/3", "gs://b/model_run/3")


def _containers(manifest, replica):
    return manifest["spec"]["tfReplicaSpecs"][replica]["template"]["spec"]["containers"]


def test_multi_worker_mirrored_job_is_n_identical_workers():
    manifest = tfjob.tfjob_manifest("trainer-x", "ml", "reg/img:1", "multi_worker_mirrored",
                                    TFJOB_SETTINGS, ARGS, service_account="runner")
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Worker"] and specs["Worker"]["replicas"] == 3
    assert specs["Worker"]["restartPolicy"] == "ExitCode"
    [container] = _containers(manifest, "Worker")
    assert container["name"] == "tensorflow" and container["image"] == "reg/img:1"
    assert container["command"] == ["python", "-m", "models.train_worker"]
    assert container["args"] == ARGS
    assert container["resources"]["limits"] == {"cpu": "4", "memory": "8Gi",
                                                "nvidia.com/gpu": "1"}
    assert specs["Worker"]["template"]["spec"]["serviceAccountName"] == "runner"
    assert manifest["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600


def test_parameter_server_job_has_a_chief_workers_and_ps():
    manifest = tfjob.tfjob_manifest("trainer-x", "ml", "reg/img:1", "parameter_server",
                                    TFJOB_SETTINGS, ARGS)
    specs = manifest["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "Worker": 3, "PS": 2}
    assert "nvidia.com/gpu" not in _containers(manifest, "PS")[0]["resources"]["limits"]
    with pytest.raises(ValueError, match="multi-worker strategies"):
        tfjob.tfjob_manifest("x", "ml", "i:1", "one_device", TFJOB_SETTINGS, ARGS)


class FakeApi:
    """CustomObjectsApi as the Training Operator answers: the conditions appear in turn."""

    def __init__(self, states, exists=False):
        self.states, self.exists = list(states), exists
        self.created, self.deleted, self.polls = [], [], 0

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        assert (group, version, plural) == ("kubeflow.org", "v1", "tfjobs")
        if self.exists:
            raise ApiException(status=409, reason="AlreadyExists")
        self.created.append(body)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.polls += 1
        state = self.states.pop(0) if self.states else None
        if state is None:
            return {"status": {"conditions": [{"type": "Running", "status": "True"}]}}
        return {"status": {"conditions": [{"type": "Created", "status": "True"},
                                          {"type": state, "status": "True",
                                           "message": f"job {state.lower()}"}]}}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.deleted.append(name)


MANIFEST = tfjob.tfjob_manifest("trainer-x", "ml", "i:1", "multi_worker_mirrored",
                                TFJOB_SETTINGS, ARGS)


def test_waits_for_success():
    api = FakeApi([None, None, "Succeeded"])
    assert tfjob.run_tfjob(api, MANIFEST, 100, sleep=lambda s: None).startswith("Succeeded")
    assert api.created == [MANIFEST] and api.polls == 3


def test_a_failed_job_fails_the_step_with_where_to_look():
    with pytest.raises(tfjob.TFJobError, match="Failed: job failed.*kubectl -n ml logs"):
        tfjob.run_tfjob(FakeApi([None, "Failed"]), MANIFEST, 100, sleep=lambda s: None)


def test_a_job_past_its_timeout_is_deleted():
    api, now = FakeApi([]), [0.0]

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(tfjob.TFJobError, match="did not finish within 60s"):
        tfjob.run_tfjob(api, MANIFEST, 60, poll_s=15, clock=lambda: now[0], sleep=sleep)
    assert api.deleted == ["trainer-x"]


def test_a_retried_step_waits_for_its_existing_job():
    api = FakeApi(["Succeeded"], exists=True)
    tfjob.run_tfjob(api, MANIFEST, 100, sleep=lambda s: None)
    assert api.created == [] and api.polls == 1


def test_job_names_are_stable_and_short():
    name = tfjob.job_name("gs://b/tfx/penguins/Trainer/model/17")
    assert name == tfjob.job_name("gs://b/tfx/penguins/Trainer/model/17")
    assert name != tfjob.job_name("gs://b/tfx/penguins/Trainer/model/18")
    assert len(name) <= 20 and name.startswith("trainer-")


def test_executor_hands_the_trainer_artifacts_to_the_job_and_checks_the_export(
        tmp_path, monkeypatch):
    """The Trainer step on Kubeflow: inputs' URIs and its exec-properties go to every replica;
    the chief's SavedModel lands in the Trainer's own model artifact."""
    from tfx.types import artifact_utils, standard_artifacts

    from models.trainer_properties import trainer_exec_properties
    from pipeline.config import load_config
    from tests.helpers import write_config

    config = load_config(write_config(tmp_path, {
        "training.distribution_strategy": "multi_worker_mirrored",
        "kubeflow.namespace": "ml", "kubeflow.service_account": "trainer"}))
    props = trainer_exec_properties(config)

    def artifact(kind, uri, splits=None):
        instance = kind()
        instance.uri = str(uri)
        if splits:
            instance.split_names = artifact_utils.encode_split_names(splits)
        return [instance]

    inputs = {"examples": artifact(standard_artifacts.Examples, tmp_path / "ex", ["train", "eval"]),
              "transform_graph": artifact(standard_artifacts.TransformGraph, tmp_path / "tg")}
    outputs = {"model": artifact(standard_artifacts.Model, tmp_path / "model"),
               "model_run": artifact(standard_artifacts.ModelRun, tmp_path / "run")}

    class ChiefWrites(FakeApi):
        def create_namespaced_custom_object(self, **kwargs):
            super().create_namespaced_custom_object(**kwargs)
            (tmp_path / "model" / "Format-Serving").mkdir(parents=True)

    api = ChiefWrites(["Succeeded"])
    monkeypatch.setattr(tfjob, "_custom_objects_api", lambda: api)
    tfjob.TFJobTrainerExecutor().Do(inputs, outputs, props)
    [manifest] = api.created
    assert manifest["metadata"]["namespace"] == "ml"
    [container] = _containers(manifest, "Worker")
    assert container["image"] == config.kubeflow.image
    args = dict(zip(container["args"][::2], container["args"][1::2], strict=True))
    assert args["--examples"] == str(tmp_path / "ex")
    assert args["--transform-graph"] == str(tmp_path / "tg")
    assert args["--model"] == str(tmp_path / "model")
    assert json.loads(args["--exec-properties"]) == json.loads(json.dumps(props))

    # No export from the chief: the step fails instead of passing on an empty model.
    shutil.rmtree(tmp_path / "model")
    monkeypatch.setattr(tfjob, "_custom_objects_api", lambda: FakeApi(["Succeeded"]))
    with pytest.raises(tfjob.TFJobError, match="wrote no model"):
        tfjob.TFJobTrainerExecutor().Do(inputs, outputs, props)


def test_trainer_custom_config_names_the_job_pods_for_multi_worker_only(tmp_path):
    from models.trainer_properties import trainer_exec_properties
    from pipeline.config import load_config
    from tests.helpers import write_config

    def custom(strategy):
        config = load_config(write_config(tmp_path, {"training.distribution_strategy": strategy}))
        return json.loads(trainer_exec_properties(config)["custom_config"])

    assert "tfjob_pod" not in custom("one_device")
    pod = custom("parameter_server")["tfjob_pod"]
    assert pod["image"] and set(pod) == {"image", "namespace", "service_account"}


def test_checked_in_example_matches_the_renderer():
    example = REPO / "deploy" / "training" / "tfjob.example.yaml"
    header = [line for line in example.read_text().splitlines() if line.startswith("#")]
    command = " ".join(line.lstrip("# ").rstrip("\\ ") for line in header[:3])
    argv = command.split("render_tfjob.py", 1)[1].split()
    result = subprocess.run([sys.executable, str(REPO / "deploy/training/render_tfjob.py"),
                             *argv], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    rendered, checked_in = yaml.safe_load(result.stdout), yaml.safe_load(example.read_text())

    def without_properties(manifest):
        for spec in manifest["spec"]["tfReplicaSpecs"].values():
            args = spec["template"]["spec"]["containers"][0]["args"]
            value = args[args.index("--exec-properties") + 1]
            assert json.loads(value)["run_fn"] == "models.model.run_fn"
            args[args.index("--exec-properties") + 1] = "<exec-properties>"
        return manifest

    assert without_properties(rendered) == without_properties(checked_in), \
        "regenerate deploy/training/tfjob.example.yaml with the command in its header"


def test_rbac_manifest_is_valid_kubernetes():
    tool = Path(sys.executable).parent / "kubernetes-validate"
    if not tool.exists():
        pytest.skip("kubernetes-validate is not installed (scripts/setup_env.sh)")
    result = subprocess.run([str(tool), "--strict", "--kubernetes-version", "1.30.0",
                             str(REPO / "deploy" / "training" / "rbac.yaml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
