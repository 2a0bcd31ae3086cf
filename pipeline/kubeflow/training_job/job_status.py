"""What a training job's status and pods say: finished or not (`finished`), and how many times
its replicas were replaced (`Restarts` for a TFJob, `JobSetRestarts` for a TrainJob), with why.
"""
from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional

from pipeline.kubeflow.training_job.kinds import (CONTAINER, REPLICA_INDEX_LABEL,
                                                  REPLICA_TYPE_LABEL, RESTART_ATTEMPT_LABEL,
                                                  TRAINER_NODE)


def _conditions(job: Mapping) -> Dict[str, dict]:
    return {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}


def finished(job: Mapping, success: str = "Succeeded") -> Optional[str]:
    """'Succeeded: ...' (a TrainJob's: 'Complete: ...') or 'Failed: ...' once the job has either
    condition (training-operator pkg/util/status.go: a Failed job takes no further condition;
    Trainer v2 pkg/runtime/framework/plugins/jobset/jobset.go Status: from the JobSet's)."""
    conditions = _conditions(job)
    for kind in ("Failed", success):
        if kind in conditions:
            message = conditions[kind].get("message")
            return kind + (f": {message}" if message else "")
    return None


class Restarts:
    """Counts the replica pods the operator replaced after a retryable exit.

    Under ExitCode the operator deletes a failed pod and creates another of the same name
    (pkg/controller.v1/common/pod.go ReconcilePods); nothing in the TFJob's status accumulates
    them (replicaStatuses counts current pods), and backoffLimit does not see them
    (kubeflow/trainer#2045). Each pod has its own UID, so a slot (replica type and index)
    showing a new UID, or a pod seen Failed with an exit the operator retries, is one restart.
    A pod that lived and was replaced between two polls is counted when its successor is seen.
    A pod that failed for good (exit 1-127) is not: the job's Failed condition reports it."""

    def __init__(self) -> None:
        self.current: Dict[tuple, str] = {}
        self.failed: Dict[str, str] = {}  # uid -> "worker-1 exit 137 (OOMKilled)"

    def update(self, pods: Iterable[Mapping]) -> int:
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels, uid = meta.get("labels") or {}, meta.get("uid")
            slot = (labels.get(REPLICA_TYPE_LABEL), labels.get(REPLICA_INDEX_LABEL))
            previous = self.current.get(slot)
            if previous and previous != uid:
                self.failed.setdefault(previous, f"{slot[0]}-{slot[1]} replaced")
            self.current[slot] = uid
            code = _exit_code(pod)
            # Retried: exit 128+, or no exit code at all (the operator's 0xbeef; evicted).
            if (pod.get("status") or {}).get("phase") == "Failed" and (
                    code is None or code >= 128):
                self.failed[uid] = f"{slot[0]}-{slot[1]} {_exit(pod)}"
        return len(self.failed)

    def describe(self) -> str:
        return "; ".join(list(self.failed.values())[-5:])


class JobSetRestarts:
    """Counts a TrainJob's restarts: JobSet recreates all its Jobs after a failure its
    failurePolicy retries (RestartJobSet, up to the runtime's maxRestarts) and labels every
    new pod with the attempt (jobset.sigs.k8s.io/restart-attempt = status.restarts: JobSet
    v0.12.0 jobset_controller.go labelAndAnnotateObject). The highest attempt seen is the count;
    the failed pods seen are the reasons. The runtime's maxRestarts bounds them too; this holds
    the step to training.job.max_restarts whatever the runtime says."""

    def __init__(self) -> None:
        self.attempt = 0
        self.failed: Dict[str, str] = {}

    def update(self, pods: Iterable[Mapping]) -> int:
        for pod in pods:
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            try:
                self.attempt = max(self.attempt, int(labels.get(RESTART_ATTEMPT_LABEL, 0)))
            except ValueError:
                pass
            if (pod.get("status") or {}).get("phase") == "Failed":
                self.failed[meta.get("uid")] = f"{meta.get('name')} {_exit(pod)}"
        return self.attempt

    def describe(self) -> str:
        return "; ".join(list(self.failed.values())[-5:]) or "pods replaced"


def _terminated(pod: Mapping) -> Optional[dict]:
    """The training container's end, which the operator judges the pod by (the TFJob's
    `tensorflow`: pod.go; the TrainJob's `node`: its Job's podFailurePolicy)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") in (CONTAINER, TRAINER_NODE) and (
                status.get("state") or {}).get("terminated"):
            return status["state"]["terminated"]
    return None


def _exit_code(pod: Mapping) -> Optional[int]:
    code = (_terminated(pod) or {}).get("exitCode")
    return int(code) if code is not None else None


def _exit(pod: Mapping) -> str:
    terminated = _terminated(pod)
    if not terminated:
        return "failed"
    reason = terminated.get("reason")
    return f"exit {terminated.get('exitCode')}" + (f" ({reason})" if reason else "")
