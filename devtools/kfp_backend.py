"""Runs a compiled PipelineSpec here as open-source KFP 2.3.0's driver and launcher run it.

    python -m devtools.kfp_backend SPEC.yaml [--pipeline-root URI|DIR]
        [--launcher-config CONFIGMAP.yaml] [--secrets SECRETS.yaml] [--config-maps CMS.yaml]
        [--image DIR] [--parallelism N]
        [--state DIR] [--namespace NS] [--until TASK] [--no-cache] [--env KEY=VALUE]

A conformance runner, not a friendly one: each behaviour below is what the backend's code does
(kubeflow/pipelines, backend/src/v2, read at tag 2.3.0; the same lines at 2.0.5 and 2.5.0 unless
said), and the file it mirrors is named beside it in the code:
- pipeline root: --pipeline-root (the run's runtimeConfig.gcsOutputDirectory, what kfp.Client's
  pipeline_root= sets) > the `kfp-launcher` ConfigMap's defaultPipelineRoot (--launcher-config, a
  ConfigMap YAML) > minio://mlpipeline/v2/artifacts. The spec's defaultPipelineRoot is not read.
- output URIs <root>/<pipeline name>/<run id>/<task>/<output key>;
- input artifacts as the driver reads them back from ML Metadata: name = MLMD id, metadata =
  properties and custom properties (display_name, store_session_info added), type with an EMPTY
  instanceSchema; output artifacts typed from the spec;
- the cache key of cacheutils.GenerateCacheKey, scoped to "pipeline/<name>" and the namespace;
  a hit reuses the earlier execution's artifacts (same MLMD ids, so downstream keys are stable);
- the launcher: for gs://, s3://, minio:// it downloads every input artifact to its local path
  (/gcs/, /s3/, /minio/ + bucket/key) before the step and uploads each output's local folder
  after it (a missing folder only logs a warning); placeholders as getPlaceholders builds them;
  the ExecutorOutput file /tmp/kfp_outputs/output_metadata.json, parameters in /tmp/kfp/outputs;
- executors other than containers refused (resolver: not implemented in the backend; importer:
  supported by the backend, not by this runner);
- the kubernetes PlatformSpec (second YAML document): secretAsEnv / configMapAsEnv env from the
  Secrets / ConfigMaps given in --secrets / --config-maps (k8s objects, YAML); a missing one or
  key fails the step as the kubelet would; other PlatformSpec keys are named as not reproduced.
- scheduling as the Argo Workflow the backend compiles the spec to: each task starts as soon as
  every task it depends on succeeded, concurrently with the others (argocompiler/dag.go:
  addImplicitDependencies adds each input's producer to dependentTasks, `depends` makes them
  `<task>.Succeeded`); no limit on how many run at once (argocompiler/argo.go sets no
  WorkflowSpec.parallelism; --parallelism N sets one, as a cluster's Argo config may); after a
  failure no task starts, the running ones finish, then the run fails (the DAG template sets no
  failFast, Argo v3.4's default true: "stop scheduling new steps ... waits until all DAG nodes
  are completed", pkg/apis/workflow/v1alpha1/workflow_types.go DAGTemplate.FailFast);
- steps run from the image: --image DIR is the image emulated by `devtools.local_image`
  (the project installed from its wheel, the WORKDIR's COPY lines, the ENV lines), its WORKDIR
  mounted at its own path in a private mount namespace (`unshare --mount`, root only; without it
  the WORKDIR path in the command line is rewritten to the copy, and the run says so).

Object stores: s3:// and minio:// are S3 (the launcher opens minio:// with the S3 driver) and are
reached with boto3 at S3_ENDPOINT with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION from
this process's environment (on a cluster: the kfp-launcher config's session and its Secret).
gs:// is refused here (no GCS).

What differs from a cluster, on purpose: tasks share this machine's cores; with --prefork
(test suites) each `python -m` step is a fork of one interpreter that imported the image's
libraries with the image's ENV, not a fresh one (devtools/prefork.py says what that changes);
without a private mount namespace they run one at a time (their pods' /tmp/kfp folders would
be one); ML Metadata and the cache are JSON files under --state (default <root>/.kfp_local for
a local root); a pod's /gcs /s3 /minio folders live under its work folder
(<state>/pods/<run>/<task>/), so `.path` placeholders point there; a local folder as the root,
which the backend refuses (objectstore/config.go ParseBucketPathToConfig), is accepted as a
bucket every pod mounts at the same path, with nothing downloaded or uploaded, and the run says
so.

Python API: `Runner(spec, root, ..., prefork=False).run(until=None, parallelism=0) -> RunResult`
(prefork: True, or a running step_server's socket path);
`load_spec(path)` -> (pipeline spec, platform spec or None); exit status 0 run succeeded, 1 a
step failed, 2 refused.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from concurrent import futures
from pathlib import Path

import yaml

from devtools.prefork import LIBRARIES

STATE_DIR = ".kfp_local"
# backend/src/v2/config/env.go: defaultPipelineRoot, used when neither the run nor the
# kfp-launcher ConfigMap names a root.
DEFAULT_PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"
LAUNCHER_CONFIGMAP = "kfp-launcher"  # backend/src/v2/config/env.go: configMapName
# backend/src/v2/component/launcher_v2.go: localPathForURI.
LOCAL_PREFIX = {"gs://": "gcs", "minio://": "minio", "s3://": "s3"}
# backend/src/v2/component/launcher_v2.go: OutputMetadataFilepath; driver.go provisionOutputs.
OUTPUT_METADATA_FILE = "/tmp/kfp_outputs/output_metadata.json"
OUTPUT_PARAMETERS_DIR = "/tmp/kfp/outputs"
# --prefork: what a step's TFX entrypoint imports (pipeline/kubeflow/entrypoint.py), once: the
# project's libraries (devtools/prefork.py LIBRARIES), then TFX's container entrypoint.
STEP_PRELOAD = LIBRARIES + ("tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",)
TASK_KEYS = {"taskInfo", "componentRef", "inputs", "dependentTasks", "cachingOptions"}
# backend/src/v2/objectstore/config.go: bucketPattern.
BUCKET_PATTERN = re.compile(r"(^[a-z][a-z0-9]+:///?)([^/?]+)(/[^?]*)?(\?.+)?$")


class SpecError(ValueError):
    """The spec (or the run's settings) is not one the backend would run; says where."""


class TaskFailed(RuntimeError):
    """A step failed; the message holds the end of its log."""


@dataclasses.dataclass
class TaskResult:
    name: str
    status: str  # "ran" or "cached"
    seconds: float
    artifacts: dict[str, dict]  # output key -> RuntimeArtifact as MLMD gives it back
    parameters: dict[str, object]
    execution_id: int
    log: Path | None = None


@dataclasses.dataclass
class RunResult:
    run_id: str
    tasks: dict[str, TaskResult]

    def names(self, status: str) -> list[str]:
        return [n for n, t in self.tasks.items() if t.status == status]


def load_spec(path: Path) -> tuple[dict, dict | None]:
    """(PipelineSpec, kubernetes PlatformSpec or None), after checking both parse as protos."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    documents = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    if not documents:
        raise SpecError(f"{path} is empty")
    spec, platform = documents[0], (documents[1] if len(documents) > 1 else None)
    try:
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
        if platform is not None:
            json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    except json_format.ParseError as error:
        raise SpecError(f"{path} is not a KFP PipelineSpec (+ PlatformSpec): {error}") from None
    return spec, platform


def pipeline_root(runtime_root: str | None, launcher_config: dict | None) -> str:
    """The root the backend uses (backend/src/v2/driver/driver.go RootDAG:
    runtimeConfig.gcsOutputDirectory, else config.FromConfigMap(...).DefaultPipelineRoot(),
    backend/src/v2/config/env.go). The spec's own defaultPipelineRoot is not consulted."""
    if runtime_root:
        return runtime_root
    root = ((launcher_config or {}).get("data") or {}).get("defaultPipelineRoot")
    return root or DEFAULT_PIPELINE_ROOT


def read_launcher_config(path: Path) -> dict:
    """The kfp-launcher ConfigMap, as `kubectl get cm kfp-launcher -o yaml` prints it."""
    config = yaml.safe_load(Path(path).read_text())
    if not isinstance(config, dict) or config.get("kind") != "ConfigMap":
        raise SpecError(f"{path}: not a Kubernetes ConfigMap (kind: ConfigMap)")
    name = (config.get("metadata") or {}).get("name")
    if name != LAUNCHER_CONFIGMAP:
        raise SpecError(f"{path}: the ConfigMap is named {name!r}; the driver reads only "
                        f"{LAUNCHER_CONFIGMAP!r} (backend/src/v2/config/env.go)")
    return config


def read_secrets(path: Path) -> dict[str, dict[str, str]]:
    """Kubernetes Secret objects (one per YAML document, or a List) -> {name: {key: value}}."""
    return _read_objects(path, "Secret")


def read_config_maps(path: Path) -> dict[str, dict[str, str]]:
    """Kubernetes ConfigMap objects -> {name: {key: value}}."""
    return _read_objects(path, "ConfigMap")


def _read_objects(path: Path, kind: str) -> dict[str, dict[str, str]]:
    found = {}
    for document in yaml.safe_load_all(Path(path).read_text()):
        items = (document or {}).get("items", []) if (document or {}).get(
            "kind") == "List" else [document]
        for item in items:
            if not item:
                continue
            if item.get("kind") != kind:
                raise SpecError(f"{path}: a {item.get('kind')!r} where a {kind} was expected")
            values = ({k: base64.b64decode(v).decode() for k, v in (item.get("data") or {}).items()}
                      if kind == "Secret" else dict(item.get("data") or {}))
            values.update(item.get("stringData") or {})
            found[item["metadata"]["name"]] = values
    return found


def task_needs(tasks: dict[str, dict], until: str | None = None) -> dict[str, set]:
    """Each task's upstream tasks: dependentTasks plus each input's producer (argocompiler/
    dag.go addImplicitDependencies); with until, only it and what it needs."""
    needs = {name: set(task.get("dependentTasks", [])) | _producers(task)
             for name, task in tasks.items()}
    if until is not None:
        if until not in tasks:
            raise SpecError(f"no task {until!r}; tasks: {', '.join(sorted(tasks))}")
        wanted, todo = set(), [until]
        while todo:
            name = todo.pop()
            if name not in wanted:
                wanted.add(name)
                todo += needs[name]
        needs = {n: d for n, d in needs.items() if n in wanted}
    return needs


def task_order(tasks: dict[str, dict], until: str | None = None) -> list[str]:
    """Tasks in dependency order (ties by name); with until, only it and what it needs."""
    return order_of(task_needs(tasks, until))


def order_of(needs: dict[str, set]) -> list[str]:
    """task_needs' tasks in dependency order (ties by name)."""
    order: list[str] = []
    while len(order) < len(needs):
        ready = sorted(n for n, d in needs.items() if n not in order and d <= set(order))
        if not ready:
            raise SpecError(f"tasks depend on each other in a cycle: {set(needs) - set(order)}")
        order.append(ready[0])
    return order


def _producers(task: dict) -> set:
    inputs = task.get("inputs", {})
    refs = [*inputs.get("parameters", {}).values(), *inputs.get("artifacts", {}).values()]
    return {ref[kind]["producerTask"] for ref in refs
            for kind in ("taskOutputParameter", "taskOutputArtifact") if kind in ref}


def split_uri(uri: str) -> tuple[str, str, str]:
    """(scheme://, bucket, key) as backend/src/v2/objectstore/config.go parses a URI."""
    match = BUCKET_PATTERN.match(uri)
    if not match:
        raise SpecError(f"{uri}: unrecognized pipeline root format "
                        "(backend/src/v2/objectstore/config.go ParseBucketPathToConfig)")
    return match.group(1), match.group(2), (match.group(3) or "").strip("/")


class ObjectStore:
    """The launcher's bucket (objectstore.OpenBucket): S3 for s3:// and minio://, via boto3."""

    def __init__(self, environ: dict[str, str]):
        self.environ = environ
        self._client = None
        self._opening = threading.Lock()  # one client for concurrent tasks (boto3's is safe)

    def client(self, uri: str):
        scheme = split_uri(uri)[0]
        if scheme == "gs://":
            raise SpecError(f"{uri}: gs:// cannot be reached from here; use s3:// or a local "
                            "root for a conformance run")
        with self._opening:
            return self._open(uri)

    def _open(self, uri: str):
        if self._client is None:
            missing = [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
                       if not self.environ.get(k)]
            if missing or not self.environ.get("S3_ENDPOINT"):
                raise SpecError(
                    f"the launcher cannot open the bucket of {uri}: set S3_ENDPOINT and "
                    f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for this runner (on a cluster "
                    "the launcher takes them from the kfp-launcher config and the "
                    "mlpipeline-minio-artifact Secret: backend/src/v2/objectstore)")
            import boto3

            self._client = boto3.client(
                "s3", endpoint_url=self.environ["S3_ENDPOINT"],
                aws_access_key_id=self.environ["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=self.environ["AWS_SECRET_ACCESS_KEY"],
                region_name=self.environ.get("AWS_REGION") or "us-east-1")
        return self._client

    def download(self, uri: str, local_dir: Path) -> int:
        """objectstore.DownloadBlob: every object listed under the key's prefix, to
        local_dir/<relative key>; an object whose key ends in "/" is written as a file."""
        _, bucket, key = split_uri(uri)
        client, count = self.client(uri), 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
            for obj in page.get("Contents", []):
                # filepath.Rel + Join: a folder marker "<key>/" lands as a FILE at local_dir
                # (or local_dir/sub), and the files below it then cannot be written.
                target = local_dir / os.path.relpath(obj["Key"], key)
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if target.is_dir():
                        raise IsADirectoryError(f"{target} is a directory")
                    client.download_file(bucket, obj["Key"], str(target))
                except OSError as error:
                    raise TaskFailed(f"failed to download input artifact from remote storage "
                                     f"URI {uri!r}: downloadFile(): unable to complete copying "
                                     f"{obj['Key']!r} to local storage {str(target)!r}: "
                                     f"{error}") from None
                count += 1
        return count

    def upload(self, local_dir: Path, uri: str) -> int:
        """objectstore.UploadBlob: every file under local_dir to <key>/<relative path>."""
        _, bucket, key = split_uri(uri)
        client, count = self.client(uri), 0
        if local_dir.is_file():
            client.upload_file(str(local_dir), bucket, key)
            return 1
        for path in sorted(local_dir.rglob("*")):
            if path.is_file():
                client.upload_file(str(path), bucket, f"{key}/{path.relative_to(local_dir)}")
                count += 1
        return count


class Runner:
    def __init__(self, spec: dict, root: str, state: Path, platform: dict | None = None,
                 secrets: dict[str, dict[str, str]] | None = None,
                 config_maps: dict[str, dict[str, str]] | None = None,
                 image: Path | None = None, env: dict[str, str] | None = None,
                 store_env: dict[str, str] | None = None, namespace: str = "kubeflow",
                 cache: bool = True, echo=print, timeout_s: int = 3600,
                 prefork: bool | str = False, prefork_preload: tuple = STEP_PRELOAD):
        self.spec, self.root, self.state = spec, root.rstrip("/"), Path(state).resolve()
        self.name = spec["pipelineInfo"]["name"]
        self.local_root = "://" not in root
        if not self.local_root:
            split_uri(root)
        self.executors_k8s = ((platform or {}).get("platforms", {}).get("kubernetes", {})
                              .get("deploymentSpec", {}).get("executors", {}))
        self.secrets, self.config_maps = secrets or {}, config_maps or {}
        self.image = json.loads((Path(image) / "image.json").read_text()) if image else None
        self.env, self.cache, self.namespace = dict(env or {}), cache, namespace
        self.store = ObjectStore(dict(store_env or {}))
        self.echo, self.timeout_s = echo, timeout_s
        self.results: dict[str, TaskResult] = {}
        self._ids = threading.Lock()  # ML Metadata's ids, given out to concurrent tasks
        self.mount_namespace = self.image is not None and _can_unshare()
        self.prefork, self.prefork_preload = prefork, prefork_preload
        self._server = None  # the prefork server (devtools/prefork.py), started by run()

    def run(self, until: str | None = None, run_id: str | None = None,
            parallelism: int = 0) -> RunResult:
        """Runs each task once the tasks it needs succeeded, up to parallelism at once (0: no
        limit, as the backend's Workflow); after a failure starts none, lets the running ones
        finish, then raises the first failure (Argo's DAG failFast)."""
        run_id = run_id or str(uuid.uuid4())  # the backend's run ids are UUIDs
        tasks = self.spec["root"]["dag"]["tasks"]
        needs = task_needs(tasks, until)
        order = order_of(needs)
        if self.local_root:
            self.echo(f"  ! pipeline root {self.root} is a local folder: the backend refuses "
                      "it (objectstore/config.go); here it stands for a bucket every pod "
                      "mounts, so nothing is downloaded or uploaded")
        if self.image is None:
            self.echo("  ! no --image: steps run from this checkout's Python, not the image")
        elif not self.mount_namespace:
            self.echo(f"  ! no private mount namespace (unshare --mount needs root): "
                      f"{self.image['workdir']} in command lines is rewritten to the copy")
        limit = parallelism if parallelism > 0 else len(order)
        if not self.mount_namespace and limit > 1:
            self.echo("  ! no private mount namespace: tasks run one at a time (each pod's "
                      "/tmp/kfp folders would be this machine's one)")
            limit = 1
        self.record = self.state / "runs" / f"{run_id}.json"
        self.failed: dict[str, str] = {}
        self.results = {}
        errors: list[BaseException] = []
        running: dict[futures.Future, str] = {}
        succeeded: set[str] = set()
        if self.prefork:
            self._start_prefork_server()
        try:
            with futures.ThreadPoolExecutor(max_workers=max(limit, 1)) as pool:
                while True:
                    # Argo's dependency check: every upstream task Succeeded. Fail fast: once a
                    # task failed, nothing new starts.
                    started = set(running.values()) | succeeded | set(self.failed)
                    ready = [] if errors else [
                        n for n in order if n not in started and needs[n] <= succeeded]
                    for name in ready[:limit - len(running)]:
                        running[pool.submit(self._task, run_id, name, tasks[name])] = name
                    if not running:
                        break
                    done, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
                    for future in sorted(done, key=lambda f: order.index(running[f])):
                        name = running.pop(future)
                        try:
                            self.results[name] = future.result()
                            succeeded.add(name)
                        except (TaskFailed, SpecError, subprocess.TimeoutExpired) as error:
                            self.failed[name] = str(error)
                            errors.append(error)
        finally:
            self._write_record(run_id, order)
            if self._server is not None:
                self._server.close()
                self._server = None
        if errors:
            raise errors[0]
        return RunResult(run_id, {n: self.results[n] for n in order})

    def _write_record(self, run_id: str, order: list[str]) -> None:
        """The run's details, as KFP's UI shows them: each task's state and outputs."""
        record = {name: dataclasses.asdict(self.results[name]) if name in self.results
                  else {"name": name, "status": "failed", "error": self.failed[name]}
                  if name in self.failed else {"name": name, "status": "not run"}
                  for name in order}
        self.record.parent.mkdir(parents=True, exist_ok=True)
        self.record.write_text(json.dumps({"run_id": run_id, "pipeline": self.name,
                                           "root": self.root, "tasks": record},
                                          indent=1, default=str))

    # -- one task: the driver (backend/src/v2/driver/driver.go Container), then the launcher

    def _task(self, run_id: str, name: str, task: dict) -> TaskResult:
        unknown = set(task) - TASK_KEYS
        if unknown:
            raise SpecError(f"task {name}: {sorted(unknown)} is not supported here")
        component = self.spec["components"][task["componentRef"]["name"]]
        label = component["executorLabel"]
        executor = self.spec["deploymentSpec"]["executors"][label]
        if "importer" in executor:
            raise SpecError(f"task {name}: an importer. Open-source KFP supports importers "
                            "(backend/src/v2/driver/driver.go Importer); this runner does not")
        if set(executor) != {"container"}:
            # backend/src/v2/compiler/argocompiler/dag.go: "resolver not implemented yet".
            raise SpecError(f"task {name}: a {'/'.join(executor)} executor: open-source KFP "
                            "runs none (backend/src/v2/compiler/argocompiler/dag.go)")
        container = executor["container"]
        if container.get("lifecycle", {}).get("preCacheCheck"):
            # The backend never reads lifecycle hooks (Vertex AI runs them).
            self.echo(f"  ! {name}: lifecycle.preCacheCheck ignored, as open-source KFP does")
        started = time.monotonic()
        executor_input = {"inputs": self._inputs(name, task, component),
                          "outputs": self._outputs(run_id, name, component)}
        fingerprint = None
        if task.get("cachingOptions", {}).get("enableCache") and self.cache:
            fingerprint = _fingerprint(executor_input, component, container)
            cached = self._cached(fingerprint)
            if cached is not None:
                # driver.go reuseCachedOutputs: the cached execution's artifacts, as they are.
                self.echo(f"  ✓ {name} (from cache)")
                return TaskResult(name, "cached", time.monotonic() - started,
                                  cached["artifacts"], cached["parameters"],
                                  cached["execution_id"])
        env = self._pod_env(name, label, container)
        self.echo(f"  > {name} ...")
        work = self.state / "pods" / run_id / name
        log, output = self._launch(name, container, component, executor_input, work, env)
        artifacts = self._record_artifacts(executor_input["outputs"], output, work)
        parameters = self._output_parameters(name, executor_input["outputs"], output, component,
                                             work)
        execution_id = self._next_id("execution")
        seconds = time.monotonic() - started
        self.echo(f"  ✓ {name} {seconds:.1f}s")
        if fingerprint is not None:  # launcher_v2.go Execute: CreateExecutionCache
            self._store(fingerprint, name, run_id, artifacts, parameters, execution_id)
        return TaskResult(name, "ran", seconds, artifacts, parameters, execution_id, log)

    def _inputs(self, name: str, task: dict, component: dict) -> dict:
        """driver.go resolveInputs: constants, upstream parameters, upstream artifacts."""
        values, artifacts = {}, {}
        for key, source in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" in source:
                if "constant" not in source["runtimeValue"]:
                    raise SpecError(f"task {name}, parameter {key}: "
                                    f"{list(source['runtimeValue'])} (open-source KFP takes "
                                    "only `constant`: compile with pipeline spec 2.1)")
                values[key] = source["runtimeValue"]["constant"]
            elif "taskOutputParameter" in source:
                ref = source["taskOutputParameter"]
                values[key] = self.results[ref["producerTask"]].parameters[
                    ref["outputParameterKey"]]
            else:
                raise SpecError(f"task {name}, parameter {key}: {list(source)} is not "
                                "supported here")
        for key, source in task.get("inputs", {}).get("artifacts", {}).items():
            if "taskOutputArtifact" not in source:
                raise SpecError(f"task {name}, artifact {key}: {list(source)} is not "
                                "supported here")
            ref = source["taskOutputArtifact"]
            recorded = self.results[ref["producerTask"]].artifacts[ref["outputArtifactKey"]]
            # metadata/client.go GetOutputArtifactsByExecutionId: Schema "" (a TODO), and
            # OutputArtifact.ToRuntimeArtifact puts it in type.instanceSchema: every upstream
            # artifact reaches the step with an empty type, whatever the spec declares.
            artifacts[key] = {"artifacts": [{**recorded, "type": {"instanceSchema": ""}}]}
        for key, definition in component.get("inputDefinitions", {}).get(
                "parameters", {}).items():
            if key not in values and "defaultValue" not in definition and not definition.get(
                    "isOptional"):
                raise SpecError(f"task {name}: no value for its input parameter {key}")
        return {"parameterValues": values, "artifacts": artifacts}

    def _outputs(self, run_id: str, name: str, component: dict) -> dict:
        """driver.go provisionOutputs: one URI per output artifact, typed from the spec."""
        definitions = component.get("outputDefinitions", {})
        # metadata/client.go GetPipeline: the run's root is <root>/<pipeline name>/<run id>;
        # GenerateOutputURI appends <task>/<key> (2.4.1 and later put a random salt between).
        run_root = f"{self.root}/{self.name}/{run_id}"
        return {
            "artifacts": {key: {"artifacts": [{
                "uri": f"{run_root}/{name}/{key}", "type": d["artifactType"],
                **({"metadata": d["metadata"]} if "metadata" in d else {})}]}
                for key, d in definitions.get("artifacts", {}).items()},
            "parameters": {key: {"outputFile": f"{OUTPUT_PARAMETERS_DIR}/{key}"}
                           for key in definitions.get("parameters", {})},
            "outputFile": OUTPUT_METADATA_FILE}

    def _pod_env(self, name: str, label: str, container: dict) -> dict[str, str]:
        """The pod's environment: the image's ENV, the container's env, and the Secrets the
        PlatformSpec names (driver.go extendPodSpecPatch: secretAsEnv -> secretKeyRef)."""
        env = dict(self.image["env"]) if self.image else {}
        env.update({e["name"]: e["value"] for e in container.get("env", [])})
        k8s = self.executors_k8s.get(label, {})
        for key in sorted(set(k8s) - {"secretAsEnv", "configMapAsEnv"}):
            self.echo(f"  ! {name}: PlatformSpec {key} is not reproduced by this runner")
        # Appended in this order after the container's env (driver.go extendPodSpecPatch):
        # on a clash the later one wins, as in a pod.
        for field, kind, objects, source_key, option in (
                ("secretAsEnv", "Secret", self.secrets, "secretKey", "--secrets"),
                ("configMapAsEnv", "ConfigMap", self.config_maps, "configMapKey",
                 "--config-maps")):
            for entry in k8s.get(field, []):
                object_name = entry["secretName" if kind == "Secret" else "configMapName"]
                values = objects.get(object_name)
                for mapping in entry.get("keyToEnv", []):
                    if values is None or mapping[source_key] not in values:
                        # The kubelet does not start a container whose keyRef is missing.
                        what = (f"{kind.lower()} \"{object_name}\" not found"
                                if values is None else
                                f"couldn't find key {mapping[source_key]} in {kind} "
                                f"{object_name}")
                        raise TaskFailed(f"task {name}: CreateContainerConfigError: {what} "
                                         f"(the PlatformSpec's {field}; pass it with {option})")
                    env[mapping["envVar"]] = values[mapping[source_key]]
        env.update(self.env)
        return env

    # -- the launcher (backend/src/v2/component/launcher_v2.go Execute / executeV2)

    def _launch(self, name: str, container: dict, component: dict, executor_input: dict,
                work: Path, env: dict[str, str]) -> tuple[Path, dict]:
        from google.protobuf import json_format
        from kfp.pipeline_spec import pipeline_spec_pb2

        if not self.local_root:
            try:  # launcher_v2.go Execute: objectstore.OpenBucket(pipeline root) first
                self.store.client(self.root)
            except SpecError as error:
                raise TaskFailed(f"task {name}: failed to execute component: {error}") from None
        if work.exists():
            shutil.rmtree(work)
        (work / "home").mkdir(parents=True)
        for side in ("inputs", "outputs"):
            for listed in executor_input[side]["artifacts"].values():
                local = self._local_path(listed["artifacts"][0]["uri"], work)
                if side == "inputs" and local is not None:  # downloadArtifacts
                    self.store.download(listed["artifacts"][0]["uri"], local)
                elif local is not None:  # prepareOutputFolders: the parent, not the folder
                    local.parent.mkdir(parents=True, exist_ok=True)
        with_defaults = _with_defaults(executor_input, component)  # addDefaultParams
        message = json_format.ParseDict(with_defaults, pipeline_spec_pb2.ExecutorInput())
        placeholders = self._placeholders(with_defaults, json_format.MessageToJson(
            message, indent=None), work)
        argv = [_substitute(part, placeholders)
                for part in container["command"] + container.get("args", [])]
        pod_tmp = work / "tmp"
        for folder in (Path(OUTPUT_METADATA_FILE).parent, Path(OUTPUT_PARAMETERS_DIR)):
            (pod_tmp / folder.relative_to("/tmp")).mkdir(parents=True, exist_ok=True)
        env = {**_image_env(self.image), "HOME": str(work / "home"), **env}
        log = work / f"{name}.log"
        if self._server is not None and argv[:2] == ["python", "-m"] and len(argv) > 2:
            code = self._forked(argv, work, env, log)
        else:
            argv, cwd = self._in_pod(argv, work)
            with open(log, "w") as out:
                code = subprocess.run(argv, check=False, cwd=cwd, env=env, stdout=out,
                                      stderr=subprocess.STDOUT, timeout=self.timeout_s
                                      ).returncode
        if code != 0:
            tail = "\n    ".join(log.read_text(errors="replace").splitlines()[-25:])
            raise TaskFailed(f"task {name} exited with {code} (log: {log}); its last lines:\n"
                             f"    {tail}")
        output = _executor_output(self._host_path(OUTPUT_METADATA_FILE, work))
        for key, listed in executor_input["outputs"]["artifacts"].items():  # uploadOutputArtifacts
            artifact = listed["artifacts"][0]
            written = output.get("artifacts", {}).get(key, {}).get("artifacts", [{}])[0]
            uri = written.get("uri") or artifact["uri"]
            local = self._local_path(uri, work)
            if local is None:
                continue
            if not local.exists():
                self.echo(f"    {name}: Local filepath {str(local)!r} does not exist "
                          "(the launcher's warning: nothing uploaded)")
            else:
                self.store.upload(local, uri)
        return log, output

    def _local_path(self, uri: str, work: Path) -> Path | None:
        """launcher_v2.go localPathForURI (/gcs/, /s3/, /minio/ + the rest), here under the
        pod's work folder; None for a local root (no download or upload)."""
        for prefix, folder in LOCAL_PREFIX.items():
            if uri.startswith(prefix):
                return work / folder / uri[len(prefix):]
        return None

    def _host_path(self, pod_path: str, work: Path) -> Path:
        return work / "tmp" / Path(pod_path).relative_to("/tmp")

    def _placeholders(self, executor_input: dict, executor_input_json: str, work: Path
                      ) -> dict[str, str]:
        """launcher_v2.go getPlaceholders."""
        found = {"{{$}}": executor_input_json}
        for side in ("inputs", "outputs"):
            for key, listed in executor_input[side]["artifacts"].items():
                uri = listed["artifacts"][0]["uri"]
                found[f"{{{{$.{side}.artifacts['{key}'].uri}}}}"] = uri
                local = self._local_path(uri, work)
                found[f"{{{{$.{side}.artifacts['{key}'].path}}}}"] = str(local or uri)
        for key, value in executor_input["inputs"]["parameterValues"].items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, (int, float)):
                text = repr(float(value)).removesuffix(".0")  # strconv.FormatFloat 'f', -1
            else:
                text = value if isinstance(value, str) else json.dumps(value)
            found[f"{{{{$.inputs.parameters['{key}']}}}}"] = text
        for key, spec in executor_input["outputs"]["parameters"].items():
            found[f"{{{{$.outputs.parameters['{key}'].output_file}}}}"] = spec["outputFile"]
        return found

    def _in_pod(self, argv: list[str], work: Path) -> tuple[list[str], Path]:
        """The command wrapped so it sees the pod's /tmp/kfp* folders and the image's
        WORKDIR at their paths, in a private mount namespace."""
        argv, cwd, mounts = self._pod(argv, work)
        if mounts is None:
            return argv, cwd
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                mounts + 'cd "$wd"\nexec "$@"\n', "pod", *argv], work

    def _pod(self, argv: list[str], work: Path) -> tuple[list[str], Path, str | None]:
        """(argv, folder, the /bin/sh script that makes the pod's mounts or None): without a
        mount namespace the WORKDIR path in argv is rewritten to the copy instead."""
        if self.image is None:
            return argv, work, None
        workdir, copy = self.image["workdir"], self.image["workdir_copy"]
        if not self.mount_namespace:
            return [a.replace(workdir, copy) for a in argv], Path(copy), None
        return argv, Path(workdir), _MOUNT_SETUP.format(workdir=_q(workdir), copy=_q(copy),
                                                        pod=_q(str(work)))

    def _start_prefork_server(self) -> None:
        """--prefork: a server that imports the step's libraries once (step_server), or the
        running one --prefork-socket names."""
        from devtools.prefork import PreforkClient

        if isinstance(self.prefork, str):
            self._server = PreforkClient(self.prefork)
        else:
            self._server = step_server(self.image, self.state, self.prefork_preload)

    def _forked(self, argv: list[str], work: Path, env: dict[str, str], log: Path) -> int:
        """`python -m MODULE ARGS` as a fork of the prefork server, in the pod's mount
        namespace and folder as _in_pod sets them up (`unshare --propagation private` is
        `mount --make-rprivate /` after unshare)."""
        argv, cwd, mounts = self._pod(argv, work)
        log.write_text("")
        return self._server.run(
            argv[2], argv[3:], env=env, cwd=str(cwd), stdout=str(log), timeout=self.timeout_s,
            setup=None if mounts is None else "set -e; mount --make-rprivate /\n" + mounts,
            mount_namespace=mounts is not None)

    def _record_artifacts(self, outputs: dict, output: dict, work: Path) -> dict[str, dict]:
        """uploadOutputArtifacts + metadata/client.go RecordArtifact, read back as the driver
        reads it (toRuntimeArtifact): name = the MLMD id, metadata = the merged metadata plus
        display_name and store_session_info."""
        recorded = {}
        for key, listed in outputs["artifacts"].items():
            artifact = json.loads(json.dumps(listed["artifacts"][0]))
            written = output.get("artifacts", {}).get(key, {}).get("artifacts", [{}])[0]
            artifact["uri"] = written.get("uri") or artifact["uri"]  # mergeRuntimeArtifacts
            metadata = {**artifact.get("metadata", {}), **written.get("metadata", {})}
            metadata.setdefault("display_name", key)
            metadata.setdefault("store_session_info", self._session_info())
            recorded[key] = {"name": str(self._next_id("artifact")), "uri": artifact["uri"],
                             "type": type_name(artifact["type"]), "metadata": metadata}
        return recorded

    def _session_info(self) -> str:
        """objectstore.SessionInfo as JSON (backend/src/v2/config/env.go defaults)."""
        if self.local_root:
            return json.dumps({"Provider": "local", "Params": {}})
        provider = split_uri(self.root)[0][:-3]
        params = ({"accessKeyKey": "accesskey", "disableSSL": "true",
                   "endpoint": "minio-service.kubeflow:9000", "fromEnv": "false",
                   "region": "minio", "secretKeyKey": "secretkey",
                   "secretName": "mlpipeline-minio-artifact"} if provider == "minio"
                  else {"fromEnv": "true"})
        return json.dumps({"Provider": provider, "Params": params}, separators=(",", ":"))

    def _output_parameters(self, name: str, outputs: dict, output: dict, component: dict,
                           work: Path) -> dict:
        """launcher_v2.go collectOutputParameters: the ExecutorOutput first, else each
        parameter's file, typed (metadata.TextToPbValue)."""
        types = component.get("outputDefinitions", {}).get("parameters", {})
        values = dict(output.get("parameterValues", {}))
        for key, spec in outputs["parameters"].items():
            if key in values:
                continue
            path = self._host_path(spec["outputFile"], work)
            if not path.is_file():
                raise TaskFailed(f"task {name}: failed to read output parameter name={key!r} "
                                 f"path={spec['outputFile']!r}: no such file")
            values[key] = _typed(path.read_text(), types[key].get("parameterType", "STRING"))
        return values

    # -- ML Metadata ids and the cache (cacheutils: CreateExecutionCache / GetExecutionCache)

    def _cache_file(self, fingerprint: str) -> Path:
        # driver.go getFingerPrintsAndID: scope "pipeline/<name>" within the namespace.
        return (self.state / "cache" / self.namespace / "pipeline" / self.name
                / f"{fingerprint}.json")

    def _cached(self, fingerprint: str) -> dict | None:
        path = self._cache_file(fingerprint)
        return json.loads(path.read_text()) if path.is_file() else None

    def _store(self, fingerprint, name, run_id, artifacts, parameters, execution_id) -> None:
        path = self._cache_file(fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"task": name, "run_id": run_id, "artifacts": artifacts,
                                    "parameters": parameters, "execution_id": execution_id},
                                   indent=1))

    def _next_id(self, kind: str) -> int:
        counter = self.state / "mlmd" / f"last_{kind}_id"
        with self._ids:
            counter.parent.mkdir(parents=True, exist_ok=True)
            value = int(counter.read_text()) + 1 if counter.is_file() else 1
            counter.write_text(str(value))
        return value


# Bind the pod's /tmp/kfp and /tmp/kfp_outputs and the image's WORKDIR, then run the command
# from the WORKDIR (the container's working folder). The WORKDIR copy is mounted read-only: the
# image's USER cannot write there either. If the WORKDIR's parent lacks the mount point, a
# tmpfs over the parent gets the parent's entries bound back plus the mount point.
# A pod's mounts (_pod): its /tmp/kfp folders, the image's WORKDIR read-only at its path.
_MOUNT_SETUP = """set -e
for d in kfp kfp_outputs; do mkdir -p /tmp/$d {pod}/tmp/$d; mount --bind {pod}/tmp/$d /tmp/$d; done
wd={workdir}
if [ ! -d "$wd" ]; then
  parent=$(dirname "$wd"); keep={pod}/host-parent
  mkdir -p "$keep"; mount --rbind "$parent" "$keep"; mount -t tmpfs pod "$parent"
  for e in "$keep"/* "$keep"/.[!.]*; do
    [ -e "$e" ] || continue; n=$(basename "$e")
    if [ -d "$e" ]; then mkdir "$parent/$n"; else touch "$parent/$n"; fi
    mount --rbind "$e" "$parent/$n"
  done
  mkdir "$wd"
fi
mount --bind {copy} "$wd"; mount -o remount,bind,ro "$wd"
"""


def step_server(image: dict | None, folder: Path, preload=STEP_PRELOAD):
    """A prefork server for steps (devtools/prefork.py): the image's Python (None: this one)
    with the image's ENV, the step's libraries imported once. Several runs can share one
    (--prefork-socket)."""
    from devtools.prefork import PreforkServer

    env = {**_image_env(image), **(image["env"] if image else {})}
    Path(folder).mkdir(parents=True, exist_ok=True)
    return PreforkServer(str(Path(_python_bin(image)) / "python"), preload, env=env,
                         cwd=str(folder))


def _python_bin(image: dict | None) -> str:
    """The folder of the image's Python (no image: this one's)."""
    return image["python_bin"] if image else str(Path(sys.executable).parent)


def _image_env(image: dict | None) -> dict[str, str]:
    """What every pod's environment starts with: PATH with the image's Python first, LANG."""
    return {"PATH": f"{_python_bin(image)}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def type_name(artifact_type: dict) -> str:
    """The MLMD type an output is recorded as: launcher_v2.go getArtifactSchema (the instance
    schema, or "title: " + the schema title), then metadata/client.go's YAML `title`."""
    schema = artifact_type.get("instanceSchema") or f"title: {artifact_type.get('schemaTitle')}"
    title = (yaml.safe_load(schema) or {}).get("title")
    if not title:
        raise TaskFailed(f"output type {artifact_type} has no title (the backend's "
                         "metadata client stops: 'No title specified')")
    return title


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                              check=False, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _fingerprint(executor_input: dict, component: dict, container: dict) -> str:
    """cacheutils/cache.go GenerateCacheKey + GenerateFingerPrint (driver.go getFingerPrint):
    input artifact names (MLMD ids), input parameter values, output artifacts without URIs
    (name, type, metadata), output parameter types, image, command + args before
    substitution. No env. sha256 of encoding/json's compact, key-sorted form."""
    inputs, outputs = executor_input["inputs"], executor_input["outputs"]
    key = {
        "inputArtifactNames": {k: {"artifactNames": [a["name"] for a in v["artifacts"]]}
                               for k, v in inputs["artifacts"].items()},
        "inputParameterValues": inputs["parameterValues"],
        "outputArtifactsSpec": {k: {kk: vv for kk, vv in v["artifacts"][0].items()
                                    if kk in ("name", "type", "metadata")}
                                for k, v in outputs["artifacts"].items() if v["artifacts"]},
        "outputParametersSpec": {k: component["outputDefinitions"]["parameters"][k][
            "parameterType"] for k in outputs["parameters"]},
        "containerSpec": {"image": container["image"],
                          "cmdArgs": container["command"] + container.get("args", [])}}
    # Go's encoding/json escapes <, > and & in strings.
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return hashlib.sha256(text.encode()).hexdigest()


def _with_defaults(executor_input: dict, component: dict) -> dict:
    copy = json.loads(json.dumps(executor_input))
    values = copy["inputs"]["parameterValues"]
    for key, definition in component.get("inputDefinitions", {}).get("parameters", {}).items():
        if key not in values and "defaultValue" in definition:
            values[key] = definition["defaultValue"]
    return copy


def _executor_output(path: Path) -> dict:
    """launcher_v2.go getExecutorOutputFile: no file is an empty ExecutorOutput."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    if not path.is_file():
        return {}
    message = json_format.Parse(path.read_text(), pipeline_spec_pb2.ExecutorOutput())
    return json_format.MessageToDict(message)


def _typed(text: str, parameter_type: str):
    if parameter_type in ("NUMBER_INTEGER", "NUMBER_DOUBLE"):
        return float(text)
    if parameter_type == "BOOLEAN":
        return text.strip().lower() == "true"
    if parameter_type in ("LIST", "STRUCT"):
        return json.loads(text)
    return text


def _substitute(text: str, placeholders: dict[str, str]) -> str:
    for placeholder, value in placeholders.items():
        text = text.replace(placeholder, value)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.kfp_backend",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="compiled PipelineSpec YAML")
    parser.add_argument("--pipeline-root", help="the run's pipeline root (runtime config)")
    parser.add_argument("--launcher-config", type=Path,
                        help="the namespace's kfp-launcher ConfigMap (YAML)")
    parser.add_argument("--secrets", type=Path, help="YAML of Kubernetes Secret objects")
    parser.add_argument("--config-maps", type=Path,
                        help="YAML of Kubernetes ConfigMap objects (configMapAsEnv)")
    parser.add_argument("--image", type=Path,
                        help="the image emulated by `python -m devtools.local_image`")
    parser.add_argument("--state", type=Path,
                        help="ML Metadata, cache and pod folders (default: <root>/.kfp_local "
                             "for a local root; required otherwise)")
    parser.add_argument("--namespace", default="kubeflow", help="the cache's namespace")
    parser.add_argument("--until", help="run only this task and the tasks it needs")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for every step")
    parser.add_argument("--no-cache", action="store_true", help="run every task")
    parser.add_argument("--prefork", action="store_true",
                        help="start each `python -m` step as a fork of a server that imported "
                             "the image's libraries once (devtools/prefork.py), not as a fresh "
                             "interpreter: ~11 s less CPU per step; for test suites")
    parser.add_argument("--prefork-socket", metavar="PATH",
                        help="as --prefork, with a server already running (started with "
                             "conformance.step_server for the same image), shared by runs")
    parser.add_argument("--parallelism", type=int, default=0, metavar="N",
                        help="at most N tasks at once (default 0: no limit, as the backend's "
                             "Argo Workflow)")
    args = parser.parse_args(argv)
    # The runner reads protos only (kfp.pipeline_spec); without this, kfp's __init__ imports
    # kfp.dsl and kfp.Client with the kubernetes client: ~4 s of CPU per run (kfp 2.5.0
    # kfp/__init__.py; KFP's own components run with it, kfp/dsl/component_factory.py). The
    # steps' environment is built from the image and the spec, not from this process's.
    os.environ.setdefault("_KFP_RUNTIME", "true")
    env = dict(item.split("=", 1) for item in args.env)
    try:
        spec, platform = load_spec(args.spec)
        config = read_launcher_config(args.launcher_config) if args.launcher_config else None
        root = pipeline_root(args.pipeline_root, config)
        if "://" not in root:
            root = str(Path(root).resolve())
        state = args.state or (Path(root) / STATE_DIR if "://" not in root else None)
        if state is None:
            raise SpecError(f"pipeline root {root} is remote: give --state DIR for this "
                            "runner's ML Metadata and cache")
        print(f"Running {args.spec} as open-source KFP 2.3.0 would (pipeline root {root})")
        runner = Runner(spec, root, state, platform,
                        read_secrets(args.secrets) if args.secrets else None,
                        read_config_maps(args.config_maps) if args.config_maps else None,
                        args.image, env,
                        store_env=dict(os.environ), namespace=args.namespace,
                        cache=not args.no_cache,
                        prefork=args.prefork_socket or args.prefork)
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        result = runner.run(args.until, parallelism=args.parallelism)
    except SpecError as error:
        print(f"error: {error}\n  details:    {runner.record}", file=sys.stderr)
        return 2
    except (TaskFailed, subprocess.TimeoutExpired) as error:
        print(f"error: {error}", file=sys.stderr)
        print(f"Run failed\n  details:    {runner.record}")
        return 1
    print(f"Run {result.run_id} succeeded\n  ran:        {', '.join(result.names('ran')) or '-'}"
          f"\n  from cache: {', '.join(result.names('cached')) or '-'}\n  details:    "
          f"{runner.record}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
