"""The driver: the run's pipeline root (the root DAG driver) and, for each container task, its
ExecutorInput and its pod's environment. At 2.4.1 all of it is driver/driver.go; at 2.17.0 it is
split into driver/root_dag.go, driver/container.go, driver/resolve.go and driver/k8s.go."""
from __future__ import annotations

import uuid

from devtools.kfp_backend.errors import SpecError, TaskFailed
from devtools.kfp_backend.metadata import as_input
from devtools.kfp_backend.versions import Backend

# config/env.go defaultPipelineRoot: when neither the run nor kfp-launcher names a root.
DEFAULT_PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"
EXECUTOR_LOGS = "executor-logs"
# driver/driver.go provisionOutputs; component/launcher_v2.go OutputMetadataFilepath.
LEGACY_OUTPUT_FILE = "/tmp/kfp_outputs/output_metadata.json"
OUTPUT_PARAMETERS_DIR = "/tmp/kfp/outputs"


def pipeline_root(runtime_root: str | None, launcher_config: dict | None) -> str:
    """The root the backend uses (driver/root_dag.go RootDAG, driver/driver.go at 2.4.1):
    runtimeConfig.gcsOutputDirectory (kfp.Client's pipeline_root=), else the kfp-launcher
    ConfigMap's defaultPipelineRoot (config/env.go DefaultPipelineRoot), else the default. The
    spec's own defaultPipelineRoot is not read."""
    if runtime_root:
        return runtime_root
    root = ((launcher_config or {}).get("data") or {}).get("defaultPipelineRoot")
    return root or DEFAULT_PIPELINE_ROOT


def run_root(root: str, pipeline: str, run_id: str) -> str:
    """metadata/client.go GetPipeline: the run's root, GenerateOutputURI(root, [pipeline, run])."""
    return f"{root.rstrip('/')}/{pipeline}/{run_id}"


def resolve_inputs(name: str, task: dict, component: dict, results: dict,
                   final_status: dict | None = None) -> dict:
    """driver/resolve.go resolveInputs (driver/driver.go at 2.4.1): constants, upstream
    parameters, upstream artifacts as ML Metadata gives them back (metadata.as_input), a
    TASK_FINAL_STATUS (final_status: the scheduler's PipelineTaskFinalStatus, 2.14.0+).
    results: the upstream tasks' TaskResults by name."""
    values, artifacts = {}, {}
    for key, source in task.get("inputs", {}).get("parameters", {}).items():
        if "taskFinalStatus" in source:
            if not final_status:
                raise SpecError(f"task {name}, parameter {key}: a task final status, but the "
                                "task has no dependent tasks")
            values[key] = final_status
        elif "runtimeValue" in source:
            if "constant" not in source["runtimeValue"]:
                raise SpecError(f"task {name}, parameter {key}: {list(source['runtimeValue'])} "
                                "(open-source KFP takes only `constant`: compile with pipeline "
                                "spec 2.1)")
            values[key] = source["runtimeValue"]["constant"]
        elif "taskOutputParameter" in source:
            ref = source["taskOutputParameter"]
            values[key] = results[ref["producerTask"]].parameters[ref["outputParameterKey"]]
        else:
            raise SpecError(f"task {name}, parameter {key}: {list(source)} is not supported here")
    for key, source in task.get("inputs", {}).get("artifacts", {}).items():
        if "taskOutputArtifact" not in source:
            raise SpecError(f"task {name}, artifact {key}: {list(source)} is not supported here")
        ref = source["taskOutputArtifact"]
        recorded = results[ref["producerTask"]].artifacts[ref["outputArtifactKey"]]
        artifacts[key] = {"artifacts": [as_input(recorded)]}
    for key, definition in component.get("inputDefinitions", {}).get("parameters", {}).items():
        if key not in values and "defaultValue" not in definition and not definition.get(
                "isOptional"):
            raise SpecError(f"task {name}: no value for its input parameter {key}")
    return {"parameterValues": values, "artifacts": artifacts}


def provision_outputs(run_root_uri: str, name: str, component: dict, backend: Backend,
                      local_path) -> dict:
    """driver/driver.go provisionOutputs: under the task root <run root>/<task>/<uuid>
    (uuid.NewString() per execution), one URI per output artifact, typed from the spec; from
    2.5.0 `executor-logs` too (versions.py executor_logs), from 2.15.0 each named by its key
    and the ExecutorOutput file in the task root's local folder, where local_path (the
    launcher's LocalPathForURI) maps it, else the legacy /tmp path."""
    definitions = component.get("outputDefinitions", {})
    artifacts = dict(definitions.get("artifacts", {}))
    if backend.executor_logs:
        artifacts[EXECUTOR_LOGS] = {"artifactType": {"schemaTitle": "system.Artifact"}}
    task_root = f"{run_root_uri}/{name}/{uuid.uuid4()}"
    output_file = LEGACY_OUTPUT_FILE
    if backend.task_root_output_file and local_path(task_root) is not None:
        output_file = f"{local_path(task_root)}/output_metadata.json"
    return {
        "artifacts": {key: {"artifacts": [{
            **({"name": key} if backend.output_names else {}),
            "uri": f"{task_root}/{key}", "type": d["artifactType"],
            **({"metadata": d["metadata"]} if "metadata" in d else {})}]}
            for key, d in artifacts.items()},
        "parameters": {key: {"outputFile": f"{OUTPUT_PARAMETERS_DIR}/{key}"}
                       for key in definitions.get("parameters", {})},
        "outputFile": output_file}


def pod_env(name: str, container: dict, image_env: dict, k8s: dict, secrets: dict,
            config_maps: dict, extra: dict, echo) -> dict[str, str]:
    """The pod's environment: the image's ENV, the container's env, then the Secrets and
    ConfigMaps the PlatformSpec names (driver/k8s.go extendPodSpecPatch, driver/driver.go at
    2.4.1: secretAsEnv -> secretKeyRef, configMapAsEnv -> configMapKeyRef), then extra."""
    env = dict(image_env)
    env.update({e["name"]: e["value"] for e in container.get("env", [])})
    for key in sorted(set(k8s) - {"secretAsEnv", "configMapAsEnv"}):
        echo(f"  ! {name}: PlatformSpec {key} is not reproduced by this runner")
    # Appended in this order after the container's env: on a clash the later one wins, as in
    # a pod.
    for field, kind, objects, source_key, option in (
            ("secretAsEnv", "Secret", secrets, "secretKey", "--secrets"),
            ("configMapAsEnv", "ConfigMap", config_maps, "configMapKey", "--config-maps")):
        for entry in k8s.get(field, []):
            object_name = entry["secretName" if kind == "Secret" else "configMapName"]
            values = objects.get(object_name)
            for mapping in entry.get("keyToEnv", []):
                if values is None or mapping[source_key] not in values:
                    # The kubelet does not start a container whose keyRef is missing.
                    what = (f"{kind.lower()} \"{object_name}\" not found" if values is None
                            else f"couldn't find key {mapping[source_key]} in {kind} "
                                 f"{object_name}")
                    raise TaskFailed(f"task {name}: CreateContainerConfigError: {what} (the "
                                     f"PlatformSpec's {field}; pass it with {option})")
                env[mapping["envVar"]] = values[mapping[source_key]]
    env.update(extra)
    return env
