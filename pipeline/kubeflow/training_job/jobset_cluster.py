"""TF_CONFIG for a replica of a Kubeflow Trainer v2 TrainJob, built from its pod's environment.

Trainer v2 has no TensorFlow runtime (kubeflow/trainer#2699): the TrainJob runs on a runtime
with no ML policy source (the PlainML plugin, pkg/runtime/framework/plugins/plainml), which sets
no TF_CONFIG. It gives the trainer container `trainer.env` and the node count; JobSet makes one
Indexed Job `<trainjob>-node-0` whose pods have the stable hostnames
`<trainjob>-node-0-<i>.<trainjob>` (Trainer v2.3.0 pkg/runtime/framework/plugins/jobset/
jobset.go IdentifyPodNetwork; JobSet v0.12.0 pkg/controllers/jobset_controller.go: subdomain =
the JobSet's name, which is the TrainJob's), and Kubernetes sets JOB_COMPLETION_INDEX in each
(Indexed completion mode, which the runtime sets and JobSet's webhook defaults). So each
replica builds the same cluster and finds itself in it by that index. No TensorFlow here: the
worker calls this before anything runs a TensorFlow op.
"""
from __future__ import annotations

import json
import re
from typing import Mapping

# TensorFlow's gRPC port; the policy admits it
from pipeline.kubeflow.training_job.kinds import PORT
from pipeline.kubeflow.training_job.kinds import TRAINER_NODE as REPLICATED_JOB

NAME_ENV = "TFX_TRAINJOB_NAME"  # set by the Trainer step in the TrainJob's trainer.env
NODES_ENV = "TFX_TRAINJOB_NUM_NODES"  # the same, = trainer.numNodes
INDEX_ENV = "JOB_COMPLETION_INDEX"  # Kubernetes, for a pod of an Indexed Job
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


class ClusterEnvError(ValueError):
    """The pod's environment does not describe a TrainJob replica."""


def is_trainjob_replica(environ: Mapping[str, str]) -> bool:
    return NAME_ENV in environ


def _integer(environ: Mapping[str, str], key: str) -> int:
    value = environ.get(key)
    if value is None:
        raise ClusterEnvError(f"{key} is not set: a TrainJob replica gets it from "
                              + ("Kubernetes (an Indexed Job's pod)" if key == INDEX_ENV
                                 else "the Trainer step (trainer.env)"))
    try:
        return int(value.strip())
    except ValueError:
        raise ClusterEnvError(f"{key}={value!r} is not an integer") from None


def tf_config_from_jobset(environ: Mapping[str, str]) -> str:
    """TF_CONFIG (JSON) for multi_worker_mirrored: every node a worker, worker 0 the chief."""
    name = environ.get(NAME_ENV, "")
    if not _DNS_LABEL.fullmatch(name) or len(name) > 63:
        raise ClusterEnvError(f"{NAME_ENV}={name!r} is not a TrainJob name (a DNS-1035 label)")
    nodes, index = _integer(environ, NODES_ENV), _integer(environ, INDEX_ENV)
    if nodes < 1:
        raise ClusterEnvError(f"{NODES_ENV}={nodes}: a TrainJob has at least one node")
    if not 0 <= index < nodes:
        raise ClusterEnvError(f"{INDEX_ENV}={index} is outside the TrainJob's {nodes} nodes "
                              f"(0..{nodes - 1}); is {NODES_ENV} its trainer.numNodes?")
    workers = [f"{name}-{REPLICATED_JOB}-0-{i}.{name}:{PORT}" for i in range(nodes)]
    return json.dumps({"cluster": {"worker": workers},
                       "task": {"type": "worker", "index": index}})
