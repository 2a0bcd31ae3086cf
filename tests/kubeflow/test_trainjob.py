"""The Trainer step on Kubeflow Trainer v2 (training.operator: trainjob): the TrainJob it submits
and the runtime it runs on validate strictly against the v2.3.0 CRDs, the replicas build a
TF_CONFIG whose hosts are the pods the JobSet makes, and the hardening, ownership, failure and
clean-up behaviours of the TFJob path hold for it too. The cluster is
tests/kubeflow/fake_trainer.py (the Trainer and JobSet controllers, built from the runtime's
own policies); the TFJob counterparts are test_tfjob.py and test_tfjob_security.py.
"""
from __future__ import annotations

import copy
import json
import os
import signal
import threading

import pytest

from tests.deploy import crd_schema
from tests.helpers import REPO, dump_yaml, kubernetes_validate, load_yaml_all, run_cli
from tests.kubeflow.fake_trainer import FakeTrainer, jobset_spec, load_runtime
from tests.kubeflow.test_tfjob import S3_ENV, _props, _trainer_artifacts, worker_args
from tests.kubeflow.test_tfjob_security import pod_problems, policy_problems

SETTINGS = {"workers": 3, "cpu": "4", "memory": "8Gi", "gpus_per_worker": 0,
            "timeout_s": 3600, "max_restarts": 3, "runtime": "tfx-tensorflow"}
EXAMPLE = REPO / "deploy" / "training" / "trainjob.example.yaml"


def _manifest(**kwargs):
    from pipeline.kubeflow.training_job.trainjob import trainjob_manifest

    settings = {**SETTINGS, **kwargs.pop("settings", {})}
    return trainjob_manifest("trainer-x", "ml", "reg/img:1", "multi_worker_mirrored", settings,
                             worker_args(), **kwargs)


def _run(api, manifest=None, timeout_s=3600, max_restarts=3, **kwargs):
    """run_tfjob on a TrainJob, on a clock that moves only when it sleeps."""
    from pipeline.kubeflow.training_job.watch import run_tfjob

    manifest = _manifest(settings={"workers": 2}) if manifest is None else manifest
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    return run_tfjob(api, api, manifest, timeout_s, max_restarts, sleep=sleep,
                              clock=lambda: now[0], **kwargs)


def _patched_pod(manifest):
    (patch,) = manifest["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]["template"]["spec"]


def _all_exit(code, nodes=2):
    return {("node", i): code for i in range(nodes)}


# --- TF_CONFIG from the pod's environment -----------------------------------------------------

def _env(name="trainer-x", nodes="3", index="0"):
    env = {"TFX_TRAINJOB_NAME": name, "TFX_TRAINJOB_NUM_NODES": nodes}
    if index is not None:
        env["JOB_COMPLETION_INDEX"] = index
    return env


@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_tf_config_lists_every_node_and_places_each_pod_by_its_index(nodes):
    from pipeline.kubeflow.training_job.jobset_cluster import tf_config_from_jobset

    for index in range(nodes):
        config = json.loads(tf_config_from_jobset(_env(nodes=str(nodes), index=str(index))))
        assert config["cluster"] == {"worker": [f"trainer-x-node-0-{i}.trainer-x:2222"
                                                for i in range(nodes)]}
        assert config["task"] == {"type": "worker", "index": index}


@pytest.mark.parametrize("env, message", [
    (_env(index=None), "JOB_COMPLETION_INDEX is not set: a TrainJob replica gets it from "
                       "Kubernetes"),
    (_env(index="3"), r"JOB_COMPLETION_INDEX=3 is outside the TrainJob's 3 nodes \(0..2\)"),
    (_env(index="-1"), "JOB_COMPLETION_INDEX=-1 is outside"),
    (_env(index="one"), "JOB_COMPLETION_INDEX='one' is not an integer"),
    (_env(nodes="0"), "TFX_TRAINJOB_NUM_NODES=0: a TrainJob has at least one node"),
    ({"TFX_TRAINJOB_NAME": "trainer-x", "JOB_COMPLETION_INDEX": "0"},
     "TFX_TRAINJOB_NUM_NODES is not set: a TrainJob replica gets it from the Trainer step"),
    (_env(name="Trainer_X"), "TFX_TRAINJOB_NAME='Trainer_X' is not a TrainJob name"),
])
def test_a_bad_environment_is_a_clear_error(env, message):
    from pipeline.kubeflow.training_job.jobset_cluster import ClusterEnvError, tf_config_from_jobset

    with pytest.raises(ClusterEnvError, match=message):
        tf_config_from_jobset(env)


@pytest.mark.e2e  # starts the worker entry point (imports the training code)
def test_the_worker_exits_2_with_the_error_before_training(tmp_path):
    env = {**_env(index="7"), "TF_CONFIG": None}
    result = run_cli("pipeline.kubeflow.training_job.worker", "--exec-properties", "{}",
                     "--examples", "x", "--transform-graph", "x", "--model", "x",
                     "--model-run", "x", env=env, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: JOB_COMPLETION_INDEX=7 is outside the TrainJob's 3 nodes (0..2); is "
        "TFX_TRAINJOB_NUM_NODES its trainer.numNodes?")


# --- the runtime and the TrainJob against the CRDs ----------------------------------------------

def test_the_runtime_validates_strictly_and_is_plain_ml():
    runtime = load_runtime()
    assert crd_schema.errors(runtime) == []
    policy = runtime["spec"]["mlPolicy"]
    assert set(policy) == {"numNodes"}, "a torch/mpi/jax/... source would replace PlainML"
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    assert rjob["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    pod = rjob["template"]["spec"]["template"]
    assert pod_problems(pod) == []
    assert [c["name"] for c in pod["spec"]["containers"]] == ["node"]


@pytest.mark.parametrize("break_it, field", [
    (lambda r: r["spec"]["template"]["spec"].update(failurPolicy={}), "failurPolicy"),
    (lambda r: r["spec"]["mlPolicy"].update(numNodes="2"), "numNodes"),
    (lambda r: r["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"].update(automountServiceAccountTokn=False),
     "automountServiceAccountTokn"),
], ids=["misspelt", "wrong-type", "misspelt-in-pod"])
def test_a_broken_runtime_is_refused(break_it, field):
    runtime = load_runtime()
    break_it(runtime)
    assert any(field in e for e in crd_schema.errors(runtime))


@pytest.mark.parametrize("kwargs", [
    {}, {"env": S3_ENV}, {"service_account": "pipeline-runner"},
    {"settings": {"gpus_per_worker": 2}},
    {"labels": {"app.kubernetes.io/part-of": "demo"},
     "owner": {"apiVersion": "v1", "kind": "Pod", "name": "step", "uid": "u"}},
])
def test_every_rendered_trainjob_validates_strictly_and_is_accepted(kwargs):
    manifest = _manifest(**kwargs)
    assert crd_schema.errors(manifest) == []
    api = FakeTrainer()
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs",
                                        manifest)
    assert len(api.pods) == 3


def test_a_broken_trainjob_is_refused_by_the_api():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    for break_it, field in (
            (lambda m: m["spec"]["trainer"].update(numNode=3), "numNode"),
            (lambda m: m["spec"]["trainer"].update(numNodes="3"), "numNodes"),
            (lambda m: m["spec"]["runtimeRef"].update(name="no-such-runtime"),
             "must be created before the TrainJob"),
            (lambda m: _patched_pod(m)["containers"][0].update(
                env=[{"name": "A", "value": "1"}]), "must not have envs for"),
            (lambda m: _patched_pod(m)["containers"][0].update(name="tensorflow"),
             "container that doesn't exist in the runtime job node"),
            (lambda m: m["spec"]["runtimePatches"][0].update(manager="trainer step"),
             "not a domain-prefixed path")):
        manifest = _manifest()
        break_it(manifest)
        with pytest.raises(TFJobError, match=f"could not create TrainJob ml/trainer-x: 422.*"
                                             f"{field}"):
            _run(FakeTrainer(), manifest)


def test_parameter_server_and_one_worker_are_refused(tmp_path):
    from core.config import ConfigError, load_config
    from tests.helpers import write_config

    with pytest.raises(ConfigError, match="parameter_server runs as a TFJob.*"
                                          "training.operator: tfjob"):
        load_config(write_config(tmp_path, {
            "training.distribution_strategy": "parameter_server"}))
    with pytest.raises(ValueError, match="at least 2 workers"):
        _manifest(settings={"workers": 1})
    with pytest.raises(ValueError, match="leave .*JOB_COMPLETION_INDEX"):
        _manifest(env=[{"name": "JOB_COMPLETION_INDEX", "value": "0"}])


# --- the pods the Trainer and JobSet make ------------------------------------------------------

def test_the_pods_are_the_runtime_hardened_and_run_the_trainjob_s_command():
    from pipeline.kubeflow.training_job.jobset_cluster import tf_config_from_jobset

    manifest = _manifest(env=S3_ENV, service_account="pipeline-runner")
    api = FakeTrainer()
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs",
                                        manifest)
    hosts = set()
    for pod in api.pods.values():
        spec = pod["spec"]
        assert pod_problems(pod) == [], pod["metadata"]["name"]
        assert spec["serviceAccountName"] == "pipeline-runner"
        assert pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
        (container,) = spec["containers"]
        assert container["image"] == "reg/img:1"
        assert container["command"] == ["python", "-m", "pipeline.kubeflow.training_job.worker"]
        assert container["args"] == worker_args()
        assert container["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"},
                                          "limits": {"cpu": "4", "memory": "8Gi"}}
        env = {e["name"]: e for e in container["env"]}
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]
        # The TF_CONFIG the replica will build names exactly the pods' own DNS names.
        config = json.loads(tf_config_from_jobset(
            {k: e["value"] for k, e in env.items() if "value" in e}))
        me = config["cluster"]["worker"][config["task"]["index"]]
        assert me == f"{spec['hostname']}.{spec['subdomain']}:2222"
        hosts.add(me)
    assert hosts == set(config["cluster"]["worker"])


def test_the_tf_config_the_pods_build_is_one_our_workers_accept():
    """Each pod's TF_CONFIG (built from its env as the fake gives it) parses in
    components.trainer.distribution, and exactly worker 0 is the chief that writes the model."""
    from components.trainer.distribution import parse_tf_config
    from pipeline.kubeflow.training_job.jobset_cluster import tf_config_from_jobset

    api = FakeTrainer()
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs",
                                        _manifest())
    chiefs = []
    for pod in api.pods.values():
        env = {e["name"]: e["value"] for e in pod["spec"]["env"] if "value" in e}
        assert "TF_CONFIG" not in env  # PlainML sets none
        cluster = parse_tf_config("multi_worker_mirrored", tf_config_from_jobset(env))
        assert len(cluster.jobs["worker"]) == 3
        chiefs += [pod["spec"]["hostname"]] if cluster.is_chief else []
    assert chiefs == ["trainer-x-node-0-0"]


def test_the_pods_and_the_runtime_s_job_are_valid_kubernetes(tmp_path):
    """What the controllers would create from the runtime and a TrainJob: the pods (core/v1)
    and the trainer Job (batch/v1, its podFailurePolicy too), strictly."""
    api = FakeTrainer()
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs",
                                        _manifest(env=S3_ENV))
    (rjob,) = api.jobsets["trainer-x"]["spec"]["replicatedJobs"]
    objects = [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "trainer-x-node-0"},
                "spec": rjob["template"]["spec"]}]
    objects += [{"apiVersion": "v1", "kind": "Pod", "metadata": {
        k: v for k, v in pod["metadata"].items() if k in ("name", "labels", "annotations")},
        "spec": {k: v for k, v in pod["spec"].items() if k != "env"}}
        for pod in api.pods.values()]
    paths = []
    for i, obj in enumerate(objects):
        paths.append(tmp_path / f"{i}.yaml")
        paths[-1].write_text(dump_yaml(obj))
    result = kubernetes_validate(paths)
    assert result.returncode == 0, result.stdout
    assert result.stdout.count("passed") == len(objects) == 4


def test_the_runtime_alone_gives_no_token_and_the_patch_alone_restricts():
    """Each half of the hardening is checked where it lives: a runtime without the token rule
    shows in the pods; a TrainJob without its patch still gets the runtime's securityContext,
    and the patch restores a runtime's missing one."""
    manifest = _manifest()
    loose = load_runtime()
    pod = loose["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]
    del pod["automountServiceAccountToken"], pod["securityContext"]
    del pod["containers"][0]["securityContext"]
    api = FakeTrainer(runtimes=[loose])
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs",
                                        manifest)
    problems = {p for pod in api.pods.values() for p in pod_problems(pod)}
    assert problems == {"automountServiceAccountToken is not false"}
    unpatched = copy.deepcopy(manifest)
    del unpatched["spec"]["runtimePatches"]
    spec = jobset_spec(unpatched, load_runtime())
    assert pod_problems(spec["replicatedJobs"][0]["template"]["spec"]["template"]) == []


# --- launch, wait, failures ---------------------------------------------------------------------

def test_waits_for_every_node_to_complete():
    api = FakeTrainer([{}, {("node", 0): 0}, {("node", 1): 0}])
    assert _run(api).startswith("Complete: jobset completed successfully")
    assert api.reads == 3 and [j["metadata"]["name"] for j in api.created] == ["trainer-x"]


def test_a_setup_error_fails_at_once_by_the_runtime_s_pod_failure_policy():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainer([{}, {("node", 1): 2}, {}, {}])
    with pytest.raises(TFJobError, match=r"TrainJob ml/trainer-x Failed: applying FailJobSet "
                                         r"failure policy action.*kubectl -n ml logs -l "
                                         r"jobset.sigs.k8s.io/jobset-name=trainer-x"):
        _run(api)
    assert api.reads == 2 and api.deleted == []  # the failed pod's logs are kept


def test_a_killed_node_restarts_the_jobset_within_max_restarts():
    api = FakeTrainer([{("node", 1): 137}, {("node", 0): 137}, _all_exit(0)])
    assert _run(api, max_restarts=3).startswith("Complete")
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"]
            for p in api.pods.values()} == {"2"}


def test_restarts_beyond_the_step_s_max_restarts_delete_the_job():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainer([{("node", 0): 137}, {("node", 0): 137}, {}])
    with pytest.raises(TFJobError, match=r"replicas failed 2 times, more than "
                                         r"training.job.max_restarts \(1\)"):
        _run(api, max_restarts=1)
    assert api.deleted == ["trainer-x"]


def test_the_runtime_s_max_restarts_fail_the_job_when_the_step_allows_more():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainer([{("node", 0): 137}] * 4)
    with pytest.raises(TFJobError, match="reaching max number of restarts"):
        _run(api, max_restarts=10)


def test_a_job_past_its_timeout_is_deleted():
    from pipeline.kubeflow.training_job.kinds import TFJobError

    api = FakeTrainer()
    with pytest.raises(TFJobError, match=r"did not finish within 60s"):
        _run(api, timeout_s=60)
    assert api.deleted == ["trainer-x"]


@pytest.mark.parametrize("earlier", [None, "Succeeded"])
def test_a_retried_step_takes_its_running_or_complete_job(earlier):
    api = FakeTrainer([] if earlier else [_all_exit(0)])
    api.earlier_attempt(_manifest(settings={"workers": 2}), earlier)
    assert _run(api).startswith("Complete") and api.created == []


def test_a_retried_step_replaces_its_failed_job_without_overlap():
    api = FakeTrainer([_all_exit(0)] * 3)
    api.earlier_attempt(_manifest(settings={"workers": 2}), "Failed")
    assert _run(api).startswith("Complete")
    assert api.deleted == ["trainer-x"] and len(api.created) == 1 and api.overlaps == 0


# --- the network policy, ownership, SIGTERM -----------------------------------------------------

def _labels(*names):
    api = FakeTrainer()
    for name in names:
        manifest = _manifest()
        manifest["metadata"]["name"] = name
        api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml",
                                            "trainjobs", manifest)
    return {name: [p["metadata"]["labels"] for p in api.pods.values()
                   if p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == name]
            for name in names}


def test_the_policy_admits_only_the_trainjob_s_own_pods_on_2222(tmp_path):
    from pipeline.kubeflow.training_job.manifest import network_policy

    manifest = _manifest()
    policy = network_policy(manifest, job_uid="uid-1")
    pods = _labels("trainer-x", "trainer-y")
    others = pods["trainer-y"] + [{"app": "ml-pipeline"},
                                  {"jobset.sigs.k8s.io/jobset-name": "trainer-x-2"}]
    assert policy_problems(policy, pods["trainer-x"], others) == []
    assert policy["metadata"]["ownerReferences"] == [{
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "name": "trainer-x", "uid": "uid-1"}]
    path = tmp_path / "policy.yaml"
    path.write_text(dump_yaml(policy))
    result = kubernetes_validate([path])
    assert result.returncode == 0, result.stdout
    # A TFJob's labels select nothing here: a policy with them would leave the pods open.
    tfjob_policy = copy.deepcopy(policy)
    tfjob_policy["spec"]["podSelector"]["matchLabels"] = {
        "training.kubeflow.org/job-name": "trainer-x"}
    assert "the podSelector misses some of the job's pods" in policy_problems(
        tfjob_policy, pods["trainer-x"], others)


def test_the_policy_exists_before_the_job_and_goes_with_it():
    api = FakeTrainer([_all_exit(0)])
    seen = []
    api.on_create = lambda fake: seen.append(set(fake.policies))
    _run(api)
    assert seen == [{"trainer-x-peers"}]
    job_uid = api.jobs["trainer-x"]["metadata"]["uid"]
    assert api.policies["trainer-x-peers"]["metadata"]["ownerReferences"][0]["uid"] == job_uid
    api.delete_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs",
                                        "trainer-x", propagation_policy="Foreground")
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException, match="NotFound"):
        api.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", "ml",
                                         "trainjobs", "trainer-x")
    assert api.pods == {} and api.policies == {}


class NodesWrite(FakeTrainer):
    def __init__(self, model_dir):
        super().__init__([_all_exit(0)])
        self.model_dir = model_dir

    def create_namespaced_custom_object(self, **kwargs):
        super().create_namespaced_custom_object(**kwargs)
        (self.model_dir / "Format-Serving").mkdir(parents=True)
        (self.model_dir / "Format-Serving" / "saved_model.pb").write_bytes(b"\x08\x01")


def test_the_executor_submits_a_trainjob_owned_by_the_step_s_pod(tmp_path, monkeypatch):
    from pipeline.kubeflow.training_job import executor, identity

    config, props = _props(tmp_path, **{"kubeflow.service_account": "trainer",
                                        "training.operator": "trainjob"})
    inputs, outputs = _trainer_artifacts(tmp_path)
    api = NodesWrite(tmp_path / "model")
    monkeypatch.setattr(executor, "_kubernetes_apis", lambda: (api, api, api))
    monkeypatch.setattr(identity, "pod_namespace", lambda: "ml")
    monkeypatch.setenv("KFP_POD_NAME", "demo-trainer-abc")
    monkeypatch.setenv("KFP_POD_UID", "pod-uid-1")
    executor.TrainingJobExecutor().Do(inputs, outputs, props)
    (manifest,) = api.created
    assert manifest["kind"] == "TrainJob" and manifest["metadata"]["namespace"] == "ml"
    assert manifest["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "demo-trainer-abc", "uid": "pod-uid-1"}]
    assert manifest["spec"]["runtimeRef"]["name"] == config.training.job.runtime
    trainer = manifest["spec"]["trainer"]
    assert trainer["image"] == config.kubeflow.image
    assert trainer["numNodes"] == config.training.job.workers
    args = dict(zip(trainer["args"][::2], trainer["args"][1::2], strict=True))
    assert args["--model"] == str(tmp_path / "model")
    assert json.loads(args["--exec-properties"]) == json.loads(json.dumps(props))
    assert {p["spec"]["serviceAccountName"] for p in api.pods.values()} == {"trainer"}
    assert manifest["metadata"]["name"] + "-peers" in api.policies


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_terminated_step_deletes_its_trainjob_and_policy(signum):
    from pipeline.kubeflow.training_job.watch import run_tfjob

    assert threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, lambda *a: None) for s in (signal.SIGTERM, signal.SIGINT)}
    api, polled = FakeTrainer(), threading.Event()
    list_pods = api.list_namespaced_pod

    def list_and_tell(*args, **kwargs):
        polled.set()
        return list_pods(*args, **kwargs)

    api.list_namespaced_pod = list_and_tell
    sender = threading.Thread(target=lambda: polled.wait(5) and os.kill(os.getpid(), signum),
                              daemon=True)
    try:
        sender.start()
        with pytest.raises(SystemExit) as stop:
            run_tfjob(api, api, _manifest(), timeout_s=5, max_restarts=3, poll_s=0.02)
        sender.join(5)
        assert stop.value.code == 128 + signum
        assert api.deleted == ["trainer-x"] and api.policies_deleted == ["trainer-x-peers"]
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


# --- the checked-in files -----------------------------------------------------------------------

@pytest.mark.e2e  # runs pipeline.kubeflow.training_job.render (imports the pipeline)
def test_the_checked_in_example_matches_the_renderer_and_the_crd():
    header = [line for line in EXAMPLE.read_text().splitlines() if line.startswith("#")]
    command = " ".join(line.lstrip("# ").rstrip("\\ ") for line in header[:3])
    argv = command.split("-m pipeline.kubeflow.training_job.render", 1)[1].split()
    result = run_cli("pipeline.kubeflow.training_job.render", *argv, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rendered = list(load_yaml_all(result.stdout))
    checked_in = list(load_yaml_all(EXAMPLE.read_text()))
    assert crd_schema.errors(checked_in[0]) == [] and checked_in[1]["kind"] == "NetworkPolicy"

    def without_properties(docs):
        args = docs[0]["spec"]["trainer"]["args"]
        args[args.index("--exec-properties") + 1] = "<exec-properties>"
        return docs

    assert without_properties(rendered) == without_properties(checked_in), \
        "regenerate deploy/training/trainjob.example.yaml with the command in its header"


def test_the_step_s_rbac_covers_trainjobs():
    rbac = list(load_yaml_all((REPO / "deploy" / "training" / "rbac.yaml").read_text()))
    rules = [r for d in rbac if d["kind"] == "Role" for r in d["rules"]]
    assert any("trainer.kubeflow.org" in r["apiGroups"] and "trainjobs" in r["resources"]
               and {"create", "get", "delete"} <= set(r["verbs"]) for r in rules)
    assert any("kubeflow.org" in r["apiGroups"] and "tfjobs" in r["resources"] for r in rules)
