"""Multi-worker training on Kubeflow: the Trainer step runs as a Kubeflow Trainer v2 TrainJob
(trainjob.py, `training.operator: trainjob`, the default) or a Training Operator v1 TFJob (the
legacy path, `training.operator: tfjob`). Both go through the same code; `JobKind` (kinds.py)
holds what differs:

| module | what |
|---|---|
| manifest.py | the TFJob, the job's name, the workers' arguments, the NetworkPolicy (pure) |
| trainjob.py | the TrainJob (pure) |
| kube_api.py | the Kubernetes calls on the job, its policy and pods, retried when transient |
| job_status.py | finished or not, restarts counted from the pods |
| watch.py | `run_tfjob`: create or adopt, wait, bound restarts and time, delete on SIGTERM |
| identity.py | the step pod's service account, namespace and ownerReference |
| executor.py | the Trainer's executor that puts them together |

`TrainingJobExecutor` is the Trainer's executor for multi_worker_mirrored and parameter_server
on Kubeflow. It creates the job (a TrainJob, or a TFJob of Training Operator v1.8.1) whose
replicas run the pipeline's image with `python -m pipeline.kubeflow.training_job.worker`,
handing them the URIs of the Trainer's inputs and outputs and the Trainer's own exec-properties,
waits for it, and returns: the chief has written the SavedModel into the Trainer's model
artifact, which the Evaluator and Pusher then pick up as usual. The replicas run as the step's
own service account.

TensorFlow's gRPC server (port 2222) has no authentication, so each job comes with a
NetworkPolicy (`network_policy`) that lets only the same job's pods in, on that port; the
replicas run without a Kubernetes API token, as a non-root user with no capabilities and a
read-only root file system. The TFJob is owned by the step's pod, and the step deletes it (and
its policy) when it is terminated (SIGTERM/SIGINT), so a cancelled run leaves no replicas.

Behaviours of the operator these modules rely on or works around are named beside the code,
with the training-operator v1.8.1 file they come from.
"""
from __future__ import annotations

import logging

from tfx.components.trainer.executor import GenericExecutor
from tfx.types import artifact_utils
from tfx.utils import path_utils

from core.config import TrainingConfig
from pipeline.kubeflow.training_job import identity
from pipeline.kubeflow.training_job.kinds import TFJobError
from pipeline.kubeflow.training_job.manifest import (all_peer_ports, job_name, tfjob_manifest,
                                                     worker_args)
from pipeline.kubeflow.training_job.watch import run_tfjob


def _kubernetes_apis():
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi(), client.CoreV1Api(), client.NetworkingV1Api()


class TrainingJobExecutor(GenericExecutor):
    """The Trainer's executor for multi-worker strategies on Kubeflow (see the module doc): a
    TrainJob (training.operator trainjob, trainjob.py) or a TFJob (tfjob)."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        fn_args = self._GetFnArgs(input_dict, output_dict, exec_properties)
        custom = fn_args.custom_config
        # The section as core/config/ validated and filled it (every key there: no defaults
        # here; TrainingConfig checks it again at this boundary).
        training = TrainingConfig.model_validate(custom["training"]).model_dump(mode="json")
        pod = custom["tfjob_pod"]
        model_uri = artifact_utils.get_single_uri(output_dict["model"])
        args = worker_args(
            exec_properties, artifact_utils.get_single_uri(input_dict["examples"]),
            fn_args.transform_graph_path, model_uri,
            artifact_utils.get_single_uri(output_dict["model_run"]))
        # The operator leaves serviceAccountName as the template has it, so unset the pods
        # would run as the namespace's 'default': give them the step's own identity instead.
        service_account = pod.get("service_account") or identity.pod_service_account()
        namespace = pod.get("namespace") or identity.in_cluster_namespace()
        custom_api, core_api, networking_api = _kubernetes_apis()
        build = tfjob_manifest
        if training["operator"] == "trainjob":
            from pipeline.kubeflow.training_job.trainjob import trainjob_manifest as build
        manifest = build(
            job_name(model_uri), namespace, pod["image"],
            training["distribution_strategy"], training["job"], args,
            service_account=service_account,
            labels={"app.kubernetes.io/part-of": custom["model_name"]},
            env=pod.get("env") or [], owner=identity.step_pod_owner(core_api, namespace))
        state = run_tfjob(custom_api, core_api, manifest, training["job"]["timeout_s"],
                          training["job"]["max_restarts"],
                          networking_api=networking_api, any_port=all_peer_ports(training))
        from tfx.dsl.io import fileio

        # The file, not the folder: on s3:// a folder exists only through its objects.
        saved_model = f"{path_utils.serving_model_dir(model_uri)}/saved_model.pb"
        if not fileio.exists(saved_model):
            raise TFJobError(f"the {manifest['kind']} {state.lower()} but wrote no model: "
                             f"{saved_model} is missing")
        logging.info("%s %s: the chief's model is in %s", manifest["kind"], state, saved_model)
