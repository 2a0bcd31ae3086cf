"""Kubeflow Pipelines (open-source KFP v2): compile the pipeline, upload it, run it, schedule it.

    python -m pipeline.run --runner kubeflow [--config FILE] [--endpoint URL] [--schedule]

Compiling writes a PipelineSpec YAML (what kfp.Client uploads) with TFX's KubeflowV2DagRunner, then
adapts it to what the open-source backend runs (see for_open_source_kfp). With an endpoint it
uploads the spec as a new pipeline version and starts a run, or with --schedule replaces the
nightly recurring run. The token, when the endpoint needs one, comes from KF_PIPELINES_TOKEN.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import re
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import yaml

from pipeline.config import DEFAULT_CONFIG, PipelineConfig

# deploy/kubeflow/Dockerfile's WORKDIR: the project (and configs/) inside the image.
IMAGE_WORKDIR = "/opt/pipeline"
TOKEN_ENV = "KF_PIPELINES_TOKEN"
DRIVER_SUFFIX = "Driver"
# Parameters TFX's file-based ExampleGen driver resolves (FileBasedInputProcessor) and writes back.
DRIVER_INPUTS = ("input_base", "input_config", "range_config")
DRIVER_OUTPUTS = {"span": "NUMBER_INTEGER", "input_fingerprint": "STRING",
                  "input_config": "STRING"}
# Spec keys the open-source backend cannot run: resolver executors (and their Vertex-style
# queries), Vertex custom jobs, lifecycle hooks (ignored), pre-2.1 constant values (rejected).
NOT_OPEN_SOURCE = {"resolver": "a resolver executor (open-source KFP implements none)",
                   "outputArtifactQueries": "a Vertex-style artifact query",
                   "customJob": "a Vertex custom job",
                   "lifecycle": "a lifecycle hook (open-source KFP never runs it)",
                   "constantValue": "a pre-2.1 constant (open-source KFP reads `constant`)"}


class KubeflowError(RuntimeError):
    """Why compiling or publishing stopped, in words for the user (and what it left behind)."""


# --------------------------------------------------------------------------------------------
# compile

def cluster_paths(config: PipelineConfig) -> Dict[str, Optional[str]]:
    """Where the steps read and write, as the pods see it; local paths where unset."""
    kf = config.kubeflow
    serving_dir = kf.serving_dir or str(config.serving.serving_dir)
    return {"pipeline_root": kf.pipeline_root,
            "input_base": kf.input_base or str(config.data.input_base),
            "model_base_path": f"{serving_dir.rstrip('/')}/{config.serving.model_name}",
            "schema_file": kf.schema_file or _schema_in_image(config.schema_file)}


def _schema_in_image(schema_file: Optional[Path]) -> Optional[str]:
    if schema_file is None:
        return None
    project = DEFAULT_CONFIG.parent.parent
    if project not in schema_file.parents:
        raise KubeflowError(f"schema_file {schema_file} is outside the project, so not in the "
                            "image: set kubeflow.schema_file to a URI the pods can read")
    return f"{IMAGE_WORKDIR}/{schema_file.relative_to(project).as_posix()}"


def _point_at_cluster(components, paths: Dict[str, Optional[str]]) -> None:
    """The components' local paths replaced by the cluster's (config paths are local Paths)."""
    from tfx.proto import pusher_pb2
    from tfx.utils import proto_utils

    by_id = {c.id: c for c in components}
    by_id["CsvExampleGen"].exec_properties["input_base"] = paths["input_base"]
    by_id["ServingBaseline"].exec_properties["model_base_path"] = paths["model_base_path"]
    # As JSON, the form the component's constructor stored it in.
    by_id["Pusher"].exec_properties["push_destination"] = proto_utils.proto_to_json(
        pusher_pb2.PushDestination(filesystem=pusher_pb2.PushDestination.Filesystem(
            base_directory=paths["model_base_path"])))
    if "ImportSchemaGen" in by_id:
        by_id["ImportSchemaGen"].exec_properties["schema_file"] = paths["schema_file"]
        by_id["AnomalyGate"].exec_properties["schema_hint"] = paths["schema_file"]


def spec_path(config: PipelineConfig) -> Path:
    folder = config.kubeflow.output_dir or config.runner.output_dir / "kubeflow"
    return folder / f"{config.pipeline_name}.yaml"


def _train_as_tfjob(components) -> None:
    """On a cluster, the multi-worker strategies train in a Training Operator TFJob of N pods
    (deploy/training); locally the same strategies need a TF_CONFIG cluster of their own."""
    from tfx.dsl.components.base import executor_spec

    from models.tfjob import TFJobTrainerExecutor

    [trainer] = [c for c in components if c.id == "Trainer"]
    trainer.executor_spec = executor_spec.ExecutorClassSpec(TFJobTrainerExecutor)


def compile_spec(config: PipelineConfig) -> Path:
    """Writes the open-source KFP PipelineSpec for config; returns its path."""
    from tfx.orchestration.kubeflow.v2.kubeflow_v2_dag_runner import (
        KubeflowV2DagRunner, KubeflowV2DagRunnerConfig)

    from pipeline.pipeline import build_pipeline

    paths = cluster_paths(config)
    tfx_pipeline = build_pipeline(config, beam_args=config.kubeflow.beam_args)
    _point_at_cluster(tfx_pipeline.components, paths)
    if config.training.distribution_strategy in ("multi_worker_mirrored", "parameter_server"):
        _train_as_tfjob(tfx_pipeline.components)
    # Schema 2.1 writes `parameterType`/`constant` and hands each step its inputs spec: the
    # open-source backend and TFX's container entrypoint need both.
    runner = KubeflowV2DagRunner(KubeflowV2DagRunnerConfig(
        default_image=config.kubeflow.image, use_pipeline_spec_2_1=True))
    spec = runner.run(tfx_pipeline, write_out=False)["pipelineSpec"]
    for_open_source_kfp(spec, paths["pipeline_root"])
    problems = open_source_problems(spec)
    if problems:
        raise KubeflowError("the compiled spec has what open-source KFP cannot run:\n  "
                            + "\n  ".join(problems))
    path = spec_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# PipelineSpec of '{config.pipeline_name}' for open-source Kubeflow "
                    "Pipelines v2; written by pipeline.kubeflow, do not edit.\n"
                    + yaml.safe_dump(spec, sort_keys=True))
    return path


# --------------------------------------------------------------------------------------------
# the spec, adapted to and checked against open-source KFP

def for_open_source_kfp(spec: dict, pipeline_root: Optional[str]) -> dict:
    """Adapts TFX's spec (written for Vertex) in place to what open-source KFP runs.

    TFX puts the ExampleGen driver, which finds the newest span and fingerprints it, in a
    `lifecycle.preCacheCheck` hook: Vertex runs it before the cache lookup, open-source KFP
    ignores it, and without it the executor finds no span. It becomes a task of its own, never
    cached, whose outputs (span, fingerprint, the span's input_config) are ExampleGen's inputs:
    so ExampleGen's cache key changes exactly when a new span arrives.
    """
    if pipeline_root:
        # TFX writes artifacts with TensorFlow's gfile: KFP's default MinIO root is not for it.
        spec["defaultPipelineRoot"] = pipeline_root
    tasks = spec["root"]["dag"]["tasks"]
    for name, task in list(tasks.items()):
        component = spec["components"][task["componentRef"]["name"]]
        container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
        hook = container.pop("lifecycle", {}).get("preCacheCheck")
        if hook:
            _split_driver(spec, name, task, component, container, hook)
    return spec


def _split_driver(spec: dict, name: str, task: dict, component: dict, container: dict,
                  hook: dict) -> None:
    driver = name + DRIVER_SUFFIX
    parameters = component["inputDefinitions"]["parameters"]
    inputs = {k: parameters[k] for k in DRIVER_INPUTS if k in parameters}
    spec["components"][driver] = {
        "executorLabel": f"{driver}_executor",
        "inputDefinitions": {"parameters": inputs},
        # TFX's driver also describes the examples it expects: a declared, unused artifact.
        "outputDefinitions": {
            "artifacts": {"examples": component["outputDefinitions"]["artifacts"]["examples"]},
            "parameters": {k: {"parameterType": t} for k, t in DRIVER_OUTPUTS.items()}}}
    spec["deploymentSpec"]["executors"][f"{driver}_executor"] = {"container": {
        "image": container["image"], "command": hook["command"],
        "args": ["--json_serialized_invocation_args", "{{$}}",
                 "--json_serialized_inputs_spec_args",
                 json.dumps({"parameters": inputs}, indent=2, sort_keys=True)]}}
    spec["root"]["dag"]["tasks"][driver] = {
        "taskInfo": {"name": driver}, "componentRef": {"name": driver},
        "inputs": {"parameters": {k: task["inputs"]["parameters"][k] for k in inputs}},
        # It must look at the data every run.
        "cachingOptions": {"enableCache": False}}
    parameters["span"] = {"parameterType": "NUMBER_INTEGER"}
    parameters["input_fingerprint"] = {"parameterType": "STRING"}
    for key in DRIVER_OUTPUTS:
        task["inputs"]["parameters"][key] = {"taskOutputParameter": {
            "producerTask": driver, "outputParameterKey": key}}
    task["dependentTasks"] = sorted({*task.get("dependentTasks", []), driver})
    args = container["args"]
    spec_at = args.index("--json_serialized_inputs_spec_args") + 1
    args[spec_at] = json.dumps(component["inputDefinitions"], indent=2, sort_keys=True)


def open_source_problems(spec: dict) -> List[str]:
    """What in spec the open-source KFP backend cannot run; empty when nothing."""
    problems = []
    if spec.get("schemaVersion") != "2.1.0":
        problems.append(f"schemaVersion {spec.get('schemaVersion')}: the backend reads "
                        "parameters from 2.1 fields")
    for path, key in _keys(spec):
        if key in NOT_OPEN_SOURCE:
            problems.append(f"{path}: {NOT_OPEN_SOURCE[key]}")
    for label, executor in spec.get("deploymentSpec", {}).get("executors", {}).items():
        if not set(executor) <= {"container", "importer"}:
            problems.append(f"executor {label}: {sorted(executor)} is neither a container nor "
                            "an importer")
    for name, component in spec.get("components", {}).items():
        for param, definition in component.get("inputDefinitions", {}).get(
                "parameters", {}).items():
            if "parameterType" not in definition:
                problems.append(f"components.{name}.{param}: no parameterType")
    return problems


def _keys(node, path: str = "") -> Iterator[tuple]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}".lstrip("."), key
            yield from _keys(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _keys(value, f"{path}[{index}]")


def cluster_problems(config: PipelineConfig) -> List[str]:
    """Settings that would compile but not run on a cluster: checked before any upload."""
    paths = cluster_paths(config)
    problems = []
    for key in ("pipeline_root", "input_base", "model_base_path", "schema_file"):
        value = paths[key]
        if key == "pipeline_root" and not value:
            problems.append("kubeflow.pipeline_root is not set (e.g. gs://BUCKET/tfx/NAME)")
        elif value and key != "schema_file" and "://" not in value:
            problems.append(f"{key} {value} is a local path; the pods need a URI "
                            "(kubeflow.pipeline_root / input_base / serving_dir, e.g. gs://...)")
        elif value and "YOUR_" in value:
            problems.append(f"{key} {value} still holds a placeholder")
    registry = config.kubeflow.image.split("/")[0]
    if registry == "example.com" or registry.endswith(".example.com"):  # reserved for examples
        problems.append(f"kubeflow.image {config.kubeflow.image} still names the example "
                        "registry")
    return problems


# --------------------------------------------------------------------------------------------
# publish: upload, run, schedule

def connect(endpoint: str, namespace: Optional[str] = None, timeout_s: float = 15):
    """A kfp.Client for endpoint, after one health check that fails fast and says why."""
    import certifi
    import urllib3

    token = os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = endpoint.rstrip("/") + "/apis/v2beta1/healthz"
    http = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=certifi.where())
    try:
        response = http.request("GET", url, headers=headers, timeout=timeout_s, retries=False)
    except urllib3.exceptions.HTTPError as error:
        raise KubeflowError(f"cannot reach KFP at {endpoint}: {_reason(error)}") from None
    if response.status != 200:
        raise KubeflowError(f"KFP at {endpoint} answered its health check with "
                            f"{_http_problem(response.status, response.data)}")
    try:
        multi_user = bool(json.loads(response.data or b"{}").get("multi_user"))
    except ValueError:
        raise KubeflowError(f"{endpoint} is not a KFP v2 API: its health check returned "
                            f"{response.data[:80]!r}") from None
    if multi_user and not namespace:
        raise KubeflowError(f"KFP at {endpoint} is multi-user: set kubeflow.namespace to your "
                            "profile's namespace")
    import kfp
    import kfp_server_api

    try:
        with _quiet():
            return kfp.Client(host=endpoint.rstrip("/"), existing_token=token,
                              **({"namespace": namespace} if namespace else {}))
    except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, TimeoutError) as error:
        raise KubeflowError(f"cannot open a KFP client for {endpoint}: {_reason(error)}"
                            ) from None


def _reason(error: Exception) -> str:
    """urllib3's reason without the connection object's repr."""
    return re.sub(r"^<[^>]*>: ", "", str(getattr(error, "reason", None) or error))


def _http_problem(status: int, body: bytes) -> str:
    try:
        payload = json.loads(body)
        detail = payload.get("message") or payload.get("error") or ""
    except (ValueError, AttributeError):
        detail = (body or b"")[:200].decode(errors="replace").strip()
    hint = {401: f"; authenticate: put a bearer token in {TOKEN_ENV}, or port-forward with "
                 "kubectl (your kube config)",
            403: "; the token's identity may not use this namespace",
            404: "; is this the KFP API (the ml-pipeline-ui or ml-pipeline service)?"}
    return f"HTTP {status}{': ' + detail if detail else ''}{hint.get(status, '')}"


@contextlib.contextmanager
def _quiet():
    """kfp.Client prints links and warns about server versions; we say what matters ourselves."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


class _Publication:
    """Each server call as one step; a failure names the step and what earlier steps created."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.created: List[str] = []

    def step(self, doing: str, call: Callable, *args, may_create: bool = False, **kwargs):
        import kfp_server_api
        import urllib3

        try:
            with _quiet():
                return call(*args, **kwargs)
        except kfp_server_api.ApiException as error:
            problem = _http_problem(error.status, error.body)
        except urllib3.exceptions.HTTPError as error:
            problem = f"cannot reach KFP at {self.endpoint}: {_reason(error)}"
            if may_create:  # the request may have arrived, and only its answer was lost
                problem += ("; the server may have done it before the connection failed: "
                            "check the KFP UI")
        except ValueError as error:  # the client's own checks (e.g. duplicate names)
            problem = str(error)
        left = ("\nalready created on the server (nothing was rolled back):\n  - "
                + "\n  - ".join(self.created)) if self.created else \
            "\nnothing else was created on the server"
        raise KubeflowError(f"{doing} failed: {problem}{left}") from None


def publish(spec: Path, config: PipelineConfig, endpoint: str, schedule: bool) -> List[str]:
    """Uploads spec as a new version, then starts a run or replaces the nightly schedule."""
    problems = cluster_problems(config)
    if problems:
        raise KubeflowError("not uploaded: the config is not ready for a cluster:\n  "
                            + "\n  ".join(problems))
    kf = config.kubeflow
    client = connect(endpoint, kf.namespace)
    job = _Publication(endpoint)
    name = config.pipeline_name
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    digest = hashlib.sha256(spec.read_bytes()).hexdigest()[:8]
    pipeline_id = job.step(f"looking up pipeline '{name}'", client.get_pipeline_id, name)
    if pipeline_id is None:
        pipeline = job.step(f"creating pipeline '{name}'", client.upload_pipeline, str(spec),
                            pipeline_name=name, description=f"TFX pipeline {name}",
                            namespace=kf.namespace, may_create=True)
        pipeline_id = pipeline.pipeline_id
        job.created.append(f"pipeline '{name}' ({pipeline_id})")
        versions = job.step("reading the new pipeline's version", client.list_pipeline_versions,
                            pipeline_id)
        version_id, version_name = (versions.pipeline_versions[0].pipeline_version_id,
                                    versions.pipeline_versions[0].display_name)
    else:
        version_name = f"{name}-{stamp}-{digest}"
        version = job.step(f"uploading version {version_name}", client.upload_pipeline_version,
                           str(spec), version_name, pipeline_id=pipeline_id, may_create=True)
        version_id = version.pipeline_version_id
        job.created.append(f"pipeline version {version_name} ({version_id})")
    lines = [f"Uploaded {spec.name} as pipeline '{name}' version {version_name} ({version_id})"]
    experiment = job.step(f"getting or creating experiment '{kf.experiment}'",
                          client.create_experiment, kf.experiment, namespace=kf.namespace,
                          may_create=True)
    refs = dict(pipeline_id=pipeline_id, version_id=version_id,
                service_account=kf.service_account)
    if not schedule:
        run = job.step("starting a run", client.run_pipeline, experiment.experiment_id,
                       f"{name}-{stamp}", may_create=True, **refs)
        lines.append(f"Started run {run.run_id} in experiment '{kf.experiment}': "
                     f"{endpoint.rstrip('/')}/#/runs/details/{run.run_id}")
        return lines
    return lines + _replace_schedule(client, job, config, experiment.experiment_id, refs)


def recurring_run_name(config: PipelineConfig) -> str:
    return f"{config.pipeline_name}-nightly"


def _replace_schedule(client, job: _Publication, config: PipelineConfig, experiment_id: str,
                      refs: dict) -> List[str]:
    """KFP cannot edit a recurring run: create the new one, then delete the old ones by name."""
    name = recurring_run_name(config)
    by_name = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name",
                                          "stringValue": name}]})
    listed = job.step(f"listing recurring runs named {name}", client.list_recurring_runs,
                      experiment_id=experiment_id, filter=by_name, page_size=100)
    old = [r.recurring_run_id for r in listed.recurring_runs or [] if r.display_name == name]
    new = job.step(f"creating recurring run {name}", client.create_recurring_run,
                   experiment_id, name, cron_expression=config.kubeflow.kfp_cron,
                   max_concurrency=1, no_catchup=True, enabled=True,
                   description=f"{config.pipeline_name}, cron '{config.kubeflow.schedule}'",
                   may_create=True, **refs)
    job.created.append(f"recurring run {name} ({new.recurring_run_id})")
    for recurring_run_id in old:
        job.step(f"deleting the previous recurring run {recurring_run_id} (the new one runs "
                 "too until it is deleted)", client.delete_recurring_run, recurring_run_id)
    verb = f"replaced {len(old)} earlier one(s)" if old else "created"
    return [f"Recurring run {name} ({new.recurring_run_id}) {verb} in experiment "
            f"'{config.kubeflow.experiment}': cron '{config.kubeflow.kfp_cron}' (KFP's 6 "
            "fields, seconds first), at most one run at a time, no catch-up: "
            f"{job.endpoint.rstrip('/')}/#/recurringrun/details/{new.recurring_run_id}"]


def run_kubeflow(config: PipelineConfig, endpoint: Optional[str] = None,
                 schedule: bool = False) -> int:
    """The CLI's kubeflow runner: compile, then upload and run or schedule when there is an
    endpoint. Exit codes as the local runner: 1 for any failure, with one message."""
    import sys

    endpoint = endpoint or config.kubeflow.endpoint
    try:
        _check_endpoint(endpoint)
        if schedule and not endpoint:
            raise KubeflowError("--schedule needs an endpoint: --endpoint URL or "
                                "kubeflow.endpoint in the config")
        path = compile_spec(config)
        print(f"Compiled pipeline '{config.pipeline_name}' for Kubeflow Pipelines: {path} "
              f"(image {config.kubeflow.image})")
        if not endpoint:
            print("No endpoint: compiled only. Upload it with --endpoint URL (and --schedule "
                  "for the nightly run); run it here with `python -m pipeline.kfp_local "
                  f"{path} --pipeline-root DIR`.")
            return 0
        for line in publish(path, config, endpoint, schedule):
            print(line)
    except KubeflowError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def _check_endpoint(endpoint: Optional[str]) -> None:
    """--endpoint gets the same check as kubeflow.endpoint in the config."""
    from pydantic import ValidationError

    from pipeline.config import KubeflowConfig

    try:
        KubeflowConfig(endpoint=endpoint)
    except ValidationError as error:
        raise KubeflowError(f"bad endpoint: {error.errors()[0]['msg']}".replace(
            "Value error, ", "")) from None
