"""The two operators' training jobs: their API names, pod labels and containers (`JobKind`) and
their error (`TFJobError`), shared by the launcher (manifest.py, watch.py) and the TrainJob's
manifest (trainjob.py). No Kubernetes or TFX imports here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
PORT = 2222  # the operator's default tfjob-port (pkg/apis/kubeflow.org/v1/tensorflow_defaults.go)
CONTAINER = "tensorflow"  # the container the operator gives TF_CONFIG and reads exit codes from
ENTRY = ["python", "-m", "pipeline.kubeflow.training_job.worker"]
# Pod labels the operator sets (pkg/apis/kubeflow.org/v1/common_types.go; pod.go createNewPod).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
OPERATOR_NAME = "tfjob-controller"  # pkg/controller.v1/tensorflow/tfjob_controller.go
# The image's user (deploy/kubeflow/Dockerfile: useradd --uid 10001, USER 10001).
RUN_AS_USER = 10001
TMP_DIR = "/tmp"  # the only path a replica writes locally (distribution.py mkdtemp scratch)


# JobSet's pod labels (sigs.k8s.io/jobset v0.12.0, the release Trainer v2.3.0 pins:
# api/jobset/v1alpha2/jobset_types.go, pkg/constants/constants.go; set on every pod of the JobSet
# by pkg/controllers/jobset_controller.go labelAndAnnotateObject). A TrainJob's JobSet has its
# name (Trainer pkg/runtime/framework/plugins/jobset/jobset.go Build).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
TRAINER_NODE = "node"  # the trainer replicatedJob and container (Trainer pkg/constants Node)


class TFJobError(RuntimeError):
    """The training job (TFJob or TrainJob) failed, timed out, or could not be created or
    watched."""


@dataclass(frozen=True)
class JobKind:
    """What differs between the two operators' jobs, for the code that launches and waits."""
    group: str
    version: str
    plural: str
    kind: str
    name_label: str  # the pod label holding the job's name (to list its pods)
    success: str  # the condition type of a job that finished well
    container: str  # the container whose exit code the operator judges a pod by
    installed: str  # what to install when the CRD is missing (a 404 on create)

    def peer_labels(self, job: str) -> Dict[str, str]:
        """Labels the operator puts on every replica pod of `job`, and only on those."""
        if self.kind == "TFJob":
            # pod.go createNewPod; keys: pkg/apis/kubeflow.org/v1/common_types.go
            return {JOB_NAME_LABEL: job, OPERATOR_NAME_LABEL: OPERATOR_NAME}
        return {JOBSET_NAME_LABEL: job, REPLICATED_JOB_LABEL: TRAINER_NODE}


TFJOB = JobKind(GROUP, VERSION, PLURAL, "TFJob", JOB_NAME_LABEL, "Succeeded", CONTAINER,
                "the Training Operator (its TFJob CRD)")
# trainer.kubeflow.org/v1alpha1 (Trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go:
# conditions Complete and Failed).
TRAINJOB = JobKind("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob",
                   JOBSET_NAME_LABEL, "Complete", TRAINER_NODE,
                   "Kubeflow Trainer v2 (its TrainJob CRD) and the ClusterTrainingRuntime")
KINDS = {k.kind: k for k in (TFJOB, TRAINJOB)}


def kind_of(manifest: Mapping) -> JobKind:
    return KINDS[manifest["kind"]]


def checked_env(env: Iterable[Mapping]) -> List[dict]:
    env = [dict(item) for item in env]
    names = [item.get("name") for item in env]
    if not all(isinstance(name, str) and name for name in names):
        raise ValueError(f"every tfjob env entry needs a 'name' (a Kubernetes EnvVar): {env}")
    if "TF_CONFIG" in names or "PYTHONUNBUFFERED" in names or len(set(names)) != len(names):
        raise ValueError(f"tfjob env names must be unique and leave TF_CONFIG (set by the "
                         f"Training Operator) and PYTHONUNBUFFERED alone: {names}")
    return env
