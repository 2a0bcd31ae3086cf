"""The pods of the TrainJob or TFJob that runs a multi-worker Trainer on Kubeflow."""
from __future__ import annotations

from typing import Optional

from core.config import PipelineConfig
from pipeline.kubeflow.client.kubernetes_platform import needs_object_store, pod_env

MULTI_WORKER = ("multi_worker_mirrored", "parameter_server")


def trainer_pod(config: PipelineConfig) -> Optional[dict]:
    """The replicas' pod settings for a multi-worker strategy (None for the others): the step's
    image and identity, and for s3:// paths the same object store env as the steps (credentials
    as secretKeyRef, never values)."""
    if config.training.distribution_strategy not in MULTI_WORKER:
        return None
    kf = config.kubeflow
    pod = {"image": kf.image, "namespace": kf.namespace, "service_account": kf.service_account}
    if needs_object_store(kf):
        pod["env"] = pod_env(kf.object_store)
    return pod
