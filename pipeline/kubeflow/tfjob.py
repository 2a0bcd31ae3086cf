"""Multi-worker training on Kubeflow: the Trainer step runs as a Training Operator TFJob.

`TFJobTrainerExecutor` is the Trainer's executor for multi_worker_mirrored and parameter_server
on Kubeflow. It creates a TFJob (kubeflow.org/v1) whose replicas run the pipeline's image with
`python -m models.train_worker`, handing them the URIs of the Trainer's inputs (ExampleGen's
examples, Transform's graph) and outputs (the model and model_run artifacts) and the Trainer's
own exec-properties, waits for it, and returns: the chief has written the SavedModel into the
Trainer's model artifact, which the Evaluator and Pusher then pick up as usual. The Training
Operator sets TF_CONFIG in every replica. A retried step finds its TFJob by name (derived from
the model artifact's URI) and waits for it instead of starting a second one.

`tfjob_manifest` is the pure part (tests, deploy/training/render_tfjob.py).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from tfx.components.trainer.executor import GenericExecutor
from tfx.types import artifact_utils
from tfx.utils import path_utils

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
PORT = 2222  # the Training Operator's default tfjob-port
CONTAINER = "tensorflow"  # the container name the Training Operator looks for
ENTRY = ["python", "-m", "models.train_worker"]


class TFJobError(RuntimeError):
    """The TFJob failed, timed out, or could not be created."""


def job_name(model_uri: str) -> str:
    """Stable per Trainer execution (its model artifact URI), short enough for pod names."""
    return "trainer-" + hashlib.sha256(model_uri.encode()).hexdigest()[:12]


def worker_args(exec_properties: Mapping[str, Any], examples: str, transform_graph: str,
                model: str, model_run: str) -> List[str]:
    return ["--exec-properties", json.dumps(dict(exec_properties), sort_keys=True, default=str),
            "--examples", examples, "--transform-graph", transform_graph, "--model", model,
            "--model-run", model_run]


def tfjob_manifest(name: str, namespace: str, image: str, strategy: str, tfjob: Mapping,
                   args: List[str], service_account: Optional[str] = None,
                   labels: Optional[Mapping[str, str]] = None) -> dict:
    """The TFJob: Workers (and, for parameter_server, a Chief and PS replicas), all running
    the same image and entry point; the Training Operator gives each its TF_CONFIG."""
    if strategy not in ("multi_worker_mirrored", "parameter_server"):
        raise ValueError(f"a TFJob is for multi-worker strategies, not '{strategy}'")
    cpu_memory = {"cpu": str(tfjob["cpu"]), "memory": str(tfjob["memory"])}

    def replica(count: int, gpus: int = 0) -> dict:
        limits = {**cpu_memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        pod: Dict[str, Any] = {"containers": [{
            "name": CONTAINER, "image": image, "command": ENTRY, "args": list(args),
            "ports": [{"name": "tfjob-port", "containerPort": PORT}],
            "resources": {"requests": dict(limits), "limits": limits},
            "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}]}]}
        if service_account:
            pod["serviceAccountName"] = service_account
        # ExitCode: exit codes 1-127 (a setup error, exit 2) fail the job at once; 128+ (killed,
        # e.g. the startup deadline's 137, a node lost) restart the replica.
        return {"replicas": count, "restartPolicy": "ExitCode",
                "template": {"metadata": {"labels": dict(labels or {})}, "spec": pod}}

    specs = {"Worker": replica(int(tfjob["workers"]), int(tfjob.get("gpus_per_worker", 0)))}
    if strategy == "parameter_server":
        specs = {"Chief": replica(1), **specs, "PS": replica(int(tfjob["parameter_servers"]))}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            # Done when the chief (worker 0 without a Chief replica) succeeds; parameter-server
            # workers and PS tasks serve until then and are deleted with cleanPodPolicy.
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3,
                          "activeDeadlineSeconds": int(tfjob["timeout_s"]),
                          "ttlSecondsAfterFinished": 3600},
            "tfReplicaSpecs": specs}}


def _condition(job: Mapping) -> Optional[str]:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Succeeded",
                                                                            "Failed"):
            return condition["type"] + (f": {condition.get('message')}"
                                        if condition.get("message") else "")
    return None


def run_tfjob(api, manifest: dict, timeout_s: float, poll_s: float = 15.0,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> str:
    """Creates the TFJob (or finds it, on a retried step), waits for Succeeded or Failed.

    `api` is a kubernetes.client.CustomObjectsApi. Raises TFJobError on failure or timeout
    (after deleting the job, so no replica keeps running)."""
    from kubernetes.client.exceptions import ApiException

    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    where = dict(group=GROUP, version=VERSION, namespace=namespace, plural=PLURAL)
    try:
        api.create_namespaced_custom_object(body=manifest, **where)
        logging.info("created TFJob %s/%s", namespace, name)
    except ApiException as error:
        if error.status != 409:
            raise TFJobError(f"could not create TFJob {namespace}/{name}: {error.status} "
                             f"{error.reason} (is the Training Operator installed, and may this "
                             "service account create tfjobs? deploy/training/rbac.yaml)") from None
        logging.info("TFJob %s/%s exists (a retried step): waiting for it", namespace, name)
    deadline = clock() + timeout_s
    while True:
        state = _condition(api.get_namespaced_custom_object(name=name, **where))
        if state and state.startswith("Succeeded"):
            return state
        if state:
            raise TFJobError(f"TFJob {namespace}/{name} {state} (kubectl -n {namespace} logs "
                             f"-l training.kubeflow.org/job-name={name})")
        if clock() >= deadline:
            api.delete_namespaced_custom_object(name=name, **where)
            raise TFJobError(f"TFJob {namespace}/{name} did not finish within {timeout_s:.0f}s "
                             "(training.tfjob.timeout_s); deleted it")
        sleep(poll_s)


def _in_cluster_namespace() -> str:
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "default"


def _custom_objects_api():
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi()


class TFJobTrainerExecutor(GenericExecutor):
    """The Trainer's executor for multi-worker strategies on Kubeflow (see the module doc)."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
        custom = fn_args.custom_config
        training, pod = custom["training"], custom["tfjob_pod"]
        model_uri = artifact_utils.get_single_uri(output_dict["model"])
        args = worker_args(
            exec_properties, artifact_utils.get_single_uri(input_dict["examples"]),
            fn_args.transform_graph_path, model_uri,
            artifact_utils.get_single_uri(output_dict["model_run"]))
        manifest = tfjob_manifest(
            job_name(model_uri), pod.get("namespace") or _in_cluster_namespace(), pod["image"],
            training["distribution_strategy"], training["tfjob"], args,
            service_account=pod.get("service_account"),
            labels={"app.kubernetes.io/part-of": custom.get("model_name", "trainer")})
        state = run_tfjob(_custom_objects_api(), manifest, training["tfjob"]["timeout_s"])
        serving_dir = path_utils.serving_model_dir(model_uri)
        from tfx.dsl.io import fileio

        if not fileio.exists(serving_dir):
            raise TFJobError(f"the TFJob {state.lower()} but wrote no model to {serving_dir}")
        logging.info("TFJob %s: the chief's model is in %s", state, serving_dir)
