"""The backend releases this emulation follows, and what changed between them.

Each behaviour that differs between releases is a field of Backend, true from the tag in CHANGES
on, where the kubeflow/pipelines code that does it is named (paths under backend/src/v2). Each
was read at every tag of TAGS (`git show TAG:PATH`); what is the same at 2.4.1 and 2.17.0 (the
pipeline root's order, untyped input artifacts, the Resolver refused, lifecycle hooks never read,
the output URIs' layout, secretAsEnv / configMapAsEnv) has no field. A release not in TAGS is
refused: read its code first (SOURCES: the audit diff).
"""
from __future__ import annotations

import dataclasses

from devtools.kfp_backend.errors import SpecError

TAGS = ("2.4.1", "2.5.0", "2.15.0", "2.16.0", "2.16.1", "2.17.0")
NEWEST = TAGS[-1]

# behaviour -> (the first tag that has it, where)
CHANGES = {
    "executor_logs": ("2.5.0", "driver/driver.go provisionOutputs: an `executor-logs` output "
                      "typed system.Artifact when publish_logs is true, the default "
                      "(cmd/driver/main.go, cmd/launcher-v2/main.go; PUBLISH_LOGS \"true\" in "
                      "ml-pipeline-apiserver-deployment.yaml); the launcher writes it "
                      "(component/launcher_v2.go getLogWriter)"),
    "task_root_output_file": ("2.15.0", "driver/driver.go provisionOutputs: outputs.outputFile "
                              "is <local task root>/output_metadata.json, not "
                              "/tmp/kfp_outputs/output_metadata.json"),
    "output_names": ("2.15.0", "driver/driver.go provisionOutputs: each output artifact's "
                     "name is its key (so the cache key holds it: cacheutils/cache.go)"),
    "cache_pvc_names": ("2.15.0", "cacheutils/cache.go GenerateCacheKey: containerSpec."
                        "pvcNames (driver/cache.go getFingerPrint)"),
    "session_max_retries": ("2.15.0", "config/env.go getDefaultMinioSessionInfo: maxRetries"),
    "seaweedfs_endpoint": ("2.16.0", "objectstore/config.go DefaultEndpointInMultiUserMode "
                           "seaweedfs.kubeflow:9000 (before: minio-service.kubeflow:9000)"),
    "logs_on_failure": ("2.16.0", "component/launcher_v2.go executeV2 / uploadOutputArtifacts: "
                        "a failed step's executor-logs is still uploaded and recorded"),
    "logs_retry_suffix": ("2.16.1", "component/launcher_v2.go qualifyExecutorLogsURI: the "
                          "executor-logs URI gets -<retry index> (0 on a first attempt)"),
    "logs_not_merged": ("2.16.1", "component/launcher_v2.go uploadOutputArtifacts: what the "
                        "ExecutorOutput says of executor-logs is not merged"),
    "env_credentials_with_endpoint": ("2.17.0", "objectstore/object_store.go "
                                      "createS3BucketSession: credentials.fromEnv with "
                                      "an endpoint (HasStructuredS3Settings) keeps the "
                                      "endpoint; before, fromEnv gave no session: AWS's"),
    "task_final_status": ("2.14.0", "compiler/argocompiler/dag.go addImplicitDependencies "
                          "compiles a TASK_FINAL_STATUS input (to 2.5.0: \"task final status "
                          "not supported yet\", the run is refused); driver/resolve.go "
                          "resolveInputParameter gives it the producer's state"),
    "download_under_key": ("2.17.0", "objectstore/object_store.go DownloadBlob: only keys "
                           "under <key>/ (isBlobKeyUnderPrefix), none outside it "
                           "(sanitizeDownloadPath); before, a sibling <key>-x landed beside"),
}


@dataclasses.dataclass(frozen=True)
class Backend:
    """One release's behaviours (CHANGES says what each field means and where it is)."""
    tag: str
    executor_logs: bool
    task_root_output_file: bool
    output_names: bool
    cache_pvc_names: bool
    session_max_retries: bool
    seaweedfs_endpoint: bool
    logs_on_failure: bool
    logs_retry_suffix: bool
    logs_not_merged: bool
    env_credentials_with_endpoint: bool
    task_final_status: bool
    download_under_key: bool


def backend(tag: str = NEWEST) -> Backend:
    if tag not in TAGS:
        raise SpecError(f"backend version {tag!r} is not emulated; emulated: {', '.join(TAGS)} "
                        "(a new release: audit it with the diff devtools/kfp_backend/SOURCES "
                        "names, then add its tag to versions.py)")
    return Backend(tag, **{name: _number(tag) >= _number(since)
                           for name, (since, _) in CHANGES.items()})


def _number(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.split("."))
