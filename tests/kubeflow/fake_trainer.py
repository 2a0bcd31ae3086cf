"""A Kubernetes API with Kubeflow Trainer v2.3.0 and JobSet v0.12.0 behind it, for the TrainJob
tests: the TrainJob counterpart of fake_training_operator.py, answering the same calls
(CustomObjectsApi for trainjobs, CoreV1Api pods, NetworkingV1Api policies).

What the controllers do with a TrainJob, each beside the Go source it mirrors:
- admission: the TrainJob validates strictly against the vendored CRD (tests/deploy/
  crd_schema.py, with its root CEL rules on the name), its runtime must exist
  (pkg/runtime/core/trainingruntime.go ValidateObjects; clustertrainingruntime.go), and its
  runtimePatches must name a domain-prefixed manager and only replicated jobs and containers
  the runtime has, with no env for `node` (plugins/jobset/jobset.go Validate);
- the runtime's JobSet template, with the TrainJob's runtimePatches merged in by strategic merge
  (trainingruntime.go mergeRuntimePatches; merge keys: JobSet's replicatedJobs by name, core/v1's
  containers, volumes and env by name, volumeMounts by mountPath), the trainer node count
  (plainml/plainml.go EnforceMLPolicy, jobset/jobset.go SyncParallelCount), the trainer's image,
  command, args and env on the `node` container (jobset/builder.go Trainer), its
  resourcesPerNode (trainingruntime.go newRuntimeInfo: only with an mlPolicy);
- JobSet's pods: one Indexed Job `<name>-node-0`, pod i with hostname `<name>-node-0-<i>`,
  subdomain `<name>`, JOB_COMPLETION_INDEX, and the JobSet labels (jobset_controller.go
  labelAndAnnotateObject, constructJob; batch Indexed Jobs set the env);
- failures as the runtime's own policies say: the Job's podFailurePolicy (FailJob on the exit
  codes it lists, else backoffLimit), the JobSet's failurePolicy (its rules by Job failure
  reason; otherwise RestartJobSet, recreating every Job with restart-attempt + 1, up to
  maxRestarts: jobset_controller.go executeFailurePolicy), and the TrainJob's conditions
  copied from the JobSet's (jobset/jobset.go Status).
A test scripts the replicas' exits ({("node", i): code} per read) as for the TFJob fake.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Dict, List, Optional


from tests.helpers import load_yaml
from tests.deploy import crd_schema
from tests.kubeflow.fake_training_operator import (FakeTrainingOperator, _uids)

RUNTIME = Path(__file__).resolve().parents[2] / "deploy" / "training" / \
    "clustertrainingruntime.yaml"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
MERGE_KEYS = {"replicatedJobs": "name", "containers": "name", "initContainers": "name",
              "volumes": "name", "env": "name", "volumeMounts": "mountPath"}


def load_runtime(path: Path = RUNTIME) -> dict:
    return load_yaml(path.read_text())


def validate_trainjob(body: dict, runtimes: Dict[str, dict]) -> List[str]:
    """Why the API server or the Trainer's webhook would refuse this TrainJob."""
    errors = crd_schema.errors(body)
    name = body.get("metadata", {}).get("name", "")

    # The CRD's root x-kubernetes-validations (CEL, which crd_schema does not evaluate).
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        errors.append(f"metadata.name: {name!r} must be an RFC 1035 label of at most 63")
    ref = body.get("spec", {}).get("runtimeRef", {})
    if ref.get("kind", "ClusterTrainingRuntime") != "ClusterTrainingRuntime" or \
            ref.get("name") not in runtimes:
        errors.append(f"spec.runtimeRef: {ref}: specified clusterTrainingRuntime must be "
                      "created before the TrainJob is created")
        return errors
    # The JobSet plugin's Validate (plugins/jobset/jobset.go): a domain-prefixed manager, and
    # patches only of replicated jobs and containers the runtime has, no env on `node`.
    runtime = runtimes[ref["name"]]["spec"]["template"]["spec"]
    containers = {r["name"]: {c["name"] for c in r["template"]["spec"]["template"]["spec"][
        "containers"]} for r in runtime["replicatedJobs"]}
    for patch in body["spec"].get("runtimePatches") or []:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9._~/-]+",
                            patch.get("manager", "")):
            errors.append(f"spec.runtimePatches.manager: {patch.get('manager')!r} is not a "
                          "domain-prefixed path")
        spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rjob in spec.get("replicatedJobs") or []:
            if rjob["name"] not in containers:
                errors.append("spec.runtimePatches: must not have replicated job that doesn't "
                              "exist in the runtime job template")
                continue
            pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec") or {}
            for container in pod.get("containers") or []:
                if container["name"] not in containers[rjob["name"]]:
                    errors.append("spec.runtimePatches: must not have container that doesn't "
                                  f"exist in the runtime job {rjob['name']}")
                elif container.get("env") and container["name"] == "node":
                    errors.append("spec.runtimePatches: must not have envs for the "
                                  "dataset-initializer, model-initializer, node containers")
    return errors


def strategic_merge(base, patch, key: Optional[str] = None):
    """k8s.io/apimachinery pkg/util/strategicpatch for the fields a runtimePatch carries: maps
    merge, lists with a patchMergeKey merge item by item, anything else is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = copy.deepcopy(base)
        for field, value in patch.items():
            merged[field] = strategic_merge(base.get(field), value, field) \
                if field in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        merge_key, merged = MERGE_KEYS[key], copy.deepcopy(base)
        for item in patch:
            at = [i for i, old in enumerate(merged) if old.get(merge_key) == item[merge_key]]
            if at:
                merged[at[0]] = strategic_merge(merged[at[0]], item)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    return copy.deepcopy(patch)


def _upsert_env(env: list, items: list) -> list:
    """pkg/apply UpsertEnvVars: same name replaced in place, others appended."""
    env = list(env)
    for item in items:
        at = [i for i, old in enumerate(env) if old["name"] == item["name"]]
        if at:
            env[at[0]] = copy.deepcopy(item)
        else:
            env.append(copy.deepcopy(item))
    return env


def jobset_spec(trainjob: dict, runtime: dict) -> dict:
    """The JobSet spec the Trainer builds for `trainjob` on `runtime`."""
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    for patch in trainjob["spec"].get("runtimePatches") or []:
        template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {})
        if template.get("spec"):
            spec = strategic_merge(spec, template["spec"])
    ml_policy = runtime["spec"].get("mlPolicy")
    trainer = trainjob["spec"].get("trainer") or {}
    for rjob in spec["replicatedJobs"]:
        if rjob["template"].get("metadata", {}).get("labels", {}).get(
                "trainer.kubeflow.org/trainjob-ancestor-step") != "trainer":
            continue
        rjob["replicas"] = 1
        count = trainer.get("numNodes") or (ml_policy or {}).get("numNodes", 1)
        rjob["template"]["spec"]["parallelism"] = rjob["template"]["spec"]["completions"] = count
        for container in rjob["template"]["spec"]["template"]["spec"]["containers"]:
            if container["name"] != "node":
                continue
            for field in ("image", "command", "args"):
                if trainer.get(field):
                    container[field] = copy.deepcopy(trainer[field])
            container["env"] = _upsert_env(container.get("env") or [], trainer.get("env") or [])
            if ml_policy is not None and trainer.get("resourcesPerNode"):
                resources = container.setdefault("resources", {})
                for part, values in trainer["resourcesPerNode"].items():
                    resources[part] = {**resources.get(part, {}), **values}
    return spec


class FakeTrainer(FakeTrainingOperator):
    """The API server with the Trainer and JobSet controllers; `runtimes` the installed
    ClusterTrainingRuntimes (default: deploy/training/clustertrainingruntime.yaml)."""

    def __init__(self, script=(), create_error=None, runtimes: Optional[List[dict]] = None):
        super().__init__(script, create_error)
        runtimes = runtimes if runtimes is not None else [load_runtime()]
        for runtime in runtimes:
            problems = crd_schema.errors(runtime)
            assert not problems, problems
        self.runtimes = {r["metadata"]["name"]: r for r in runtimes}
        self.jobsets: Dict[str, dict] = {}
        self._owners: Dict[str, str] = {}  # Job uid -> TrainJob uid (the ownership chain)

    def earlier_attempt(self, body: dict, final: Optional[str]) -> None:
        self._start(copy.deepcopy(body))
        if final:
            self._finish(self.jobs[body["metadata"]["name"]],
                         "Complete" if final == "Succeeded" else "Failed", final, final)

    RESOURCE = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
    JOB_LABEL = JOBSET_NAME

    def _problems(self, body: dict) -> List[str]:
        return validate_trainjob(body, self.runtimes)

    def _is_finished(self, job: dict) -> bool:
        return any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                   for c in job["status"]["conditions"])

    # --- the Trainer and JobSet controllers ---------------------------------------------
    def _start(self, body: dict) -> None:
        name = body["metadata"]["name"]
        body["metadata"]["uid"] = f"uid-{next(_uids)}"
        body["status"] = {"conditions": []}
        self.jobs[name] = body
        runtime = self.runtimes[body["spec"]["runtimeRef"]["name"]]
        self.jobsets[name] = {"spec": jobset_spec(body, runtime), "restarts": 0,
                              "uid": f"uid-{next(_uids)}"}
        self._create_jobs(body)

    def _trainer_job(self, name: str) -> dict:
        (rjob,) = self.jobsets[name]["spec"]["replicatedJobs"]
        return rjob

    def _create_jobs(self, body: dict) -> None:
        name = body["metadata"]["name"]
        jobset, rjob = self.jobsets[name], self._trainer_job(name)
        job_uid = f"uid-{next(_uids)}"
        self._owners[job_uid] = body["metadata"]["uid"]
        template = rjob["template"]["spec"]["template"]
        for index in range(int(rjob["template"]["spec"]["completions"])):
            spec = copy.deepcopy(template["spec"])
            spec["hostname"], spec["subdomain"] = f"{name}-{rjob['name']}-0-{index}", name
            for container in spec["containers"]:
                container["env"] = _upsert_env(container.get("env") or [], [
                    {"name": "JOB_COMPLETION_INDEX", "value": str(index)}])
            labels = {**template.get("metadata", {}).get("labels", {}),
                      JOBSET_NAME: name, "jobset.sigs.k8s.io/jobset-uid": jobset["uid"],
                      "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                      "jobset.sigs.k8s.io/restart-attempt": str(jobset["restarts"]),
                      "jobset.sigs.k8s.io/job-index": "0",
                      "batch.kubernetes.io/job-completion-index": str(index)}
            pod_name = f"{name}-{rjob['name']}-0-{index}-r{jobset['restarts']}"
            self.pods[pod_name] = {
                "metadata": {"name": pod_name, "uid": f"uid-{next(_uids)}", "labels": labels,
                             "annotations": dict(template.get("metadata", {}).get(
                                 "annotations", {})),
                             "ownerReferences": [{"kind": "Job", "name": f"{name}-node-0",
                                                  "uid": job_uid}]},
                "spec": {**spec, "serviceAccountName": spec.get("serviceAccountName",
                                                                "default"),
                         "env": spec["containers"][0]["env"]},
                "status": {"phase": "Running"}}

    def _pods_of(self, name: str) -> Dict[int, dict]:
        attempt = str(self.jobsets[name]["restarts"])
        return {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p
                for p in self.pods.values() if p["metadata"]["labels"][JOBSET_NAME] == name
                and p["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == attempt}

    def _exit(self, job: dict, rt: str, index: int, code: int) -> None:
        assert rt == "node", rt
        name = job["metadata"]["name"]
        pod = self._pods_of(name)[index]
        pod["status"] = {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
            {"name": "node", "state": {"terminated": {
                "exitCode": code, "reason": "OOMKilled" if code == 137 else "Error"}}}]}
        jobset, rjob = self.jobsets[name], self._trainer_job(name)
        if code == 0:
            if all(p["status"]["phase"] == "Succeeded" for p in self._pods_of(name).values()):
                # The Indexed Job completes, and with it (successPolicy All) the JobSet.
                self._finish(job, "Complete", "AllJobsCompleted",
                             "jobset completed successfully")
            return
        reason = "BackoffLimitExceeded"
        for rule in rjob["template"]["spec"].get("podFailurePolicy", {}).get("rules", []):
            codes = rule.get("onExitCodes")
            if codes and codes.get("containerName") in (None, "node") and (
                    (code in codes["values"]) == (codes["operator"] == "In")):
                if rule["action"] == "FailJob":
                    reason = "PodFailurePolicy"
                break
        policy = jobset["spec"].get("failurePolicy") or {}
        action = "RestartJobSet"
        for rule in policy.get("rules") or []:
            if reason in (rule.get("onJobFailureReasons") or [reason]):
                action = rule["action"]
                break
        if action == "FailJobSet":
            self._finish(job, "Failed", "FailJobSetFailurePolicyAction",
                         "applying FailJobSet failure policy action")
        elif jobset["restarts"] >= int(policy.get("maxRestarts", 0)):
            self._finish(job, "Failed", "ReachedMaxRestarts",
                         "jobset failed due to reaching max number of restarts")
        else:  # RestartJobSet: every Job deleted and created again, restart-attempt + 1
            for pod_name in [p for p, v in self.pods.items()
                             if v["metadata"]["labels"][JOBSET_NAME] == name]:
                del self.pods[pod_name]
            jobset["restarts"] += 1
            self._create_jobs(job)

    def _finish(self, job: dict, kind: str, reason: str, message: str) -> None:
        if any(c["type"] in ("Complete", "Failed") for c in job["status"]["conditions"]):
            return
        job["status"]["conditions"].append({
            "type": kind, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"})

    def _remove_pods(self, owner_uid: str) -> None:
        """The garbage collector down the chain TrainJob -> JobSet -> Job -> pods, and the
        NetworkPolicy the TrainJob owns."""
        jobs = {job for job, owner in self._owners.items() if owner == owner_uid}
        for pod in [p for p, v in self.pods.items()
                    if v["metadata"]["ownerReferences"][0]["uid"] in jobs]:
            del self.pods[pod]
        for name in [n for n, v in self.policies.items()
                     if any(o["uid"] == owner_uid
                            for o in v["metadata"].get("ownerReferences") or [])]:
            del self.policies[name]
