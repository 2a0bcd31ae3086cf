"""Runs a compiled PipelineSpec here as an open-source KFP release's backend runs it.

    python -m devtools.kfp_backend SPEC.yaml [--backend-version 2.17.0|2.4.1|...]
        [--pipeline-root URI|DIR] [--launcher-config CONFIGMAP.yaml] [--secrets SECRETS.yaml]
        [--config-maps CMS.yaml] [--image DIR] [--parallelism N] [--state DIR]
        [--namespace NS] [--until TASK] [--no-cache] [--env KEY=VALUE]

A conformance runner, not a friendly one: each behaviour is what kubeflow/pipelines' code does at
the release given (default: the newest emulated), and the file and function it follows are named
beside it. The modules mirror the backend's parts:
- versions: the releases emulated and what differs between them, each with its file and tag;
- driver: the pipeline root (the run's, else kfp-launcher's, else minio://mlpipeline/v2/
  artifacts), a task's ExecutorInput (inputs as ML Metadata gives them back, untyped; outputs
  under <root>/<pipeline>/<run id>/<task>/<uuid>/<key>), its pod's env (secretAsEnv,
  configMapAsEnv);
- cache: the cache key and entries; metadata: ML Metadata's records;
- objectstore: the launcher's bucket (s3://, minio:// through boto3, the session from the
  kfp-launcher ConfigMap's providers and the Secret they name, as config/s3.go and
  object_store.go give it; no providers.s3: AWS's client, whose first call fails; gs:// refused
  here);
- resources: the container's requests and limits as the driver reads them and the API server
  checks them, and OOMKilled for a step whose peak RSS went over its memory limit;
- launcher: downloads, placeholders, the executor-logs artifact, the ExecutorOutput file,
  output parameters, uploads; pod: the image, the pod's mounts, --prefork;
- scheduler: the Argo Workflow's walk of the DAG (concurrency, failFast, DAG components such as
  kfp's exit handler, exit tasks run whatever the outcome, TASK_FINAL_STATUS from 2.14.0), the
  Resolver refused;
- cli: this command. SOURCES lists the Go files followed: a new release's audit is
  `git diff` of those files between two tags (deploy/kubeflow/README.md, Compatibility).

What differs from a cluster, on purpose: tasks share this machine's cores; with --prefork each
`python -m` step is a fork of one interpreter that imported the image's libraries
(devtools/prefork.py says what that changes); without a private mount namespace they run one at a
time; ML Metadata and the cache are JSON files under --state (default <root>/.kfp_local for a
local root); a pod's /gcs /s3 /minio folders live under its work folder
(<state>/pods/<run>/<task>/), so `.path` placeholders and, from 2.15.0, the ExecutorOutput file
point there; a local folder as the root, which the backend refuses (objectstore/config.go
ParseBucketPathToConfig), is accepted as a bucket every pod mounts at the same path, with nothing
downloaded or uploaded, and the run says so; the kubernetes PlatformSpec's keys other than
secretAsEnv / configMapAsEnv are named as not reproduced; importers are refused; a run whose
paths (the run's root, the spec's defaultPipelineRoot, a task's path constants: the data, the
serving dir, the schema, the report's config) still hold a placeholder of the template's configs
(YOUR_BUCKET, ...) is refused before any step, naming the config key to set (spec.py
placeholder_paths), where a cluster would fail in the first step that opens one.

Python API: `Runner(spec, root, state, ..., version=NEWEST).run(until=None, parallelism=0) ->
RunResult`; `Runner.run_step(task, executor_input)` runs one task's launcher on a given
ExecutorInput; `load_spec(path)` -> (pipeline spec, platform spec or None).
"""
from devtools.kfp_backend.driver import DEFAULT_PIPELINE_ROOT, EXECUTOR_LOGS, pipeline_root
from devtools.kfp_backend.errors import SpecError, TaskFailed
from devtools.kfp_backend.objectstore import ObjectStore
from devtools.kfp_backend.pod import STEP_PRELOAD, step_server
from devtools.kfp_backend.scheduler import RunResult, Runner, TaskResult, task_needs, task_order
from devtools.kfp_backend.spec import (load_spec, read_config_maps, read_launcher_config,
                                       read_secrets)
from devtools.kfp_backend.versions import NEWEST, TAGS, backend

__all__ = ["DEFAULT_PIPELINE_ROOT", "EXECUTOR_LOGS", "NEWEST", "STEP_PRELOAD", "TAGS",
           "ObjectStore", "RunResult", "Runner", "SpecError", "TaskFailed", "TaskResult",
           "backend", "load_spec", "pipeline_root", "read_config_maps", "read_launcher_config",
           "read_secrets", "step_server", "task_needs", "task_order"]
