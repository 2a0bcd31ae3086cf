"""What the config asks for against this machine: the training settings, the paths and,
on the local runner with serving.release canary, the Rollout."""
from __future__ import annotations

from typing import List, Optional

from core import rollout
from core.config import PipelineConfig
from pipeline.doctor.findings import FAIL, OK, WARN, Finding
from pipeline.doctor.machine import Machine, precision_here
from pipeline.doctor.storage import kubeflow_storage_findings, storage_findings


def config_findings(config: PipelineConfig, machine: Machine, runner: str = "local"
                    ) -> List[Finding]:
    """What the config asks for, against this machine: a FAIL is something a run would need.
    runner: local (this machine runs every step) or kubeflow (it compiles; pods run the steps)."""
    training, found = config.training, []
    strategy, gpus = training.distribution_strategy, len(machine.gpus)
    if training.collective_implementation == "nccl" and not gpus:
        found.append(Finding("config", FAIL, "training.collective_implementation is 'nccl' and "
                             "no GPU is visible", "use 'auto' on CPU machines, or run where "
                             "GPUs are visible"))
    visible = {f"/gpu:{i}" for i in range(gpus)}
    missing = [d for d in training.devices if d.lower().replace("device:", "") not in visible]
    if missing:
        found.append(Finding("config", FAIL, f"training.devices lists {missing}, not visible "
                             f"here (visible: {sorted(visible) or 'none'})",
                             "list visible devices only, or leave 'devices' empty for all"))
    if strategy == "tpu" and not machine.tpus and training.tpu == "local":
        found.append(Finding("config", FAIL, "distribution_strategy 'tpu' with tpu 'local' and "
                             "no TPU here", "run on a TPU VM, or name a remote TPU in "
                             "training.tpu"))
    if (strategy in ("multi_worker_mirrored", "parameter_server") and not machine.tf_config
            and runner == "local"):
        found.append(Finding("config", FAIL, f"distribution_strategy '{strategy}' needs the "
                             "cluster in TF_CONFIG, which is not set here",
                             "use one_device or mirrored locally; multi-worker strategies run "
                             "as a TFJob on Kubeflow (deploy/training)"))
    if training.jit_compile and machine.xla_error:
        found.append(Finding("config", FAIL, f"training.jit_compile is on and XLA fails here: "
                             f"{machine.xla_error}", "set training.jit_compile: false"))
    level, text = precision_here(training.precision, machine)
    if level == WARN:
        found.append(Finding("config", WARN, f"training.precision {text}",
                             "float32 is as fast on this machine"))
    return found + (storage_findings(config) + release_findings(config) if runner == "local"
                    else kubeflow_storage_findings(config))


def release_findings(config: PipelineConfig,
                     kubernetes: Optional[rollout.Cluster] = None) -> List[Finding]:
    """serving.release: canary on the local runner: ServingBaseline and the Release step read
    the Rollout through this machine's kube config (core/rollout.py Cluster.connect)."""
    ref = rollout.rollout_ref(config.serving)
    if not ref:
        return []
    namespace, _, name = ref.partition("/")
    try:
        state = rollout.read_rollout(kubernetes or rollout.Cluster.connect(), namespace, name)
    except rollout.ReleaseError as error:
        return [Finding("release", FAIL, f"serving.release canary: the Rollout {ref}: {error}",
                        "apply deploy/serving/k8s/rollout/<variant> and bind "
                        "common/release-rbac.yaml to your user, or set serving.release: direct")]
    stable = rollout.stable_version(state)
    return [Finding("release", OK, f"the Rollout {ref}: version "
                    f"{rollout.pod_version(state)}, stable {stable or 'none promoted yet'}")]
