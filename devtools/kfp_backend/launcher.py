"""The launcher (component/launcher_v2.go Execute -> executeV2 -> execute): opens the bucket,
downloads the input artifacts, runs the command with its placeholders filled in, tees its output
into the executor-logs artifact (2.5.0+), reads the ExecutorOutput file, collects the output
parameters, uploads and records the output artifacts."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from devtools.kfp_backend.driver import EXECUTOR_LOGS
from devtools.kfp_backend.errors import SpecError, TaskFailed
from devtools.kfp_backend.metadata import Metadata
from devtools.kfp_backend.objectstore import ObjectStore, session_info
from devtools.kfp_backend.pod import Pod
from devtools.kfp_backend.resources import check_memory
from devtools.kfp_backend.usage import Usage
from devtools.kfp_backend.versions import Backend

# component/launcher_v2.go LocalPathForURI.
LOCAL_PREFIX = {"gs://": "gcs", "minio://": "minio", "s3://": "s3"}


def local_path(uri: str, work: Path) -> Path | None:
    """component/launcher_v2.go LocalPathForURI (/gcs/, /s3/, /minio/ + the rest), here under
    the pod's folder on this machine. A local root's path is itself (a bucket every pod mounts
    at that path; the backend refuses such a root); None for another scheme."""
    for prefix, folder in LOCAL_PREFIX.items():
        if uri.startswith(prefix):
            return work / folder / uri[len(prefix):]
    return Path(uri) if uri.startswith("/") else None


def transfers(uri: str) -> bool:
    """Whether the launcher downloads / uploads this artifact (not a local root's)."""
    return any(uri.startswith(prefix) for prefix in LOCAL_PREFIX)


@dataclasses.dataclass
class Launched:
    log: Path
    artifacts: dict[str, dict]  # output key -> the artifact as ML Metadata recorded it
    parameters: dict[str, object]
    usage: Usage | None = None


class Launcher:
    def __init__(self, backend: Backend, root: str, store: ObjectStore, metadata: Metadata,
                 pod: Pod, echo=print):
        self.backend, self.root, self.store, self.metadata = backend, root, store, metadata
        self.pod, self.echo = pod, echo

    def execute(self, name: str, container: dict, component: dict, executor_input: dict,
                work: Path, env: dict[str, str], resources: dict | None = None) -> Launched:
        from google.protobuf import json_format
        from kfp.pipeline_spec import pipeline_spec_pb2

        if transfers(self.root):
            try:  # Execute: objectstore.OpenBucket(pipeline root) first
                self.store.client(self.root, env)
            except SpecError as error:
                raise TaskFailed(f"task {name}: failed to execute component: {error}") from None
        if work.exists():
            shutil.rmtree(work)
        (work / "home").mkdir(parents=True)
        executor_input = json.loads(json.dumps(executor_input))
        outputs = executor_input["outputs"]["artifacts"]
        if self.backend.logs_retry_suffix and EXECUTOR_LOGS in outputs:
            # qualifyExecutorLogsForRetry: KFP_RETRY_INDEX, 0 on the first attempt (no retries
            # here), before the placeholders are filled in.
            outputs[EXECUTOR_LOGS]["artifacts"][0]["uri"] += "-0"
        for listed in executor_input["inputs"]["artifacts"].values():  # downloadArtifacts
            uri = listed["artifacts"][0]["uri"]
            if transfers(uri):
                self.store.download(uri, local_path(uri, work), pod=work, env=env)
        for listed in outputs.values():  # prepareOutputFolders: the parent, not the folder
            local = local_path(listed["artifacts"][0]["uri"], work)
            if local is not None:
                local.parent.mkdir(parents=True, exist_ok=True)
        with_defaults = _with_defaults(executor_input, component)  # addDefaultParams
        message = json_format.ParseDict(with_defaults, pipeline_spec_pb2.ExecutorInput())
        placeholders = _placeholders(with_defaults, json_format.MessageToJson(
            message, indent=None), work)
        argv = [_substitute(part, placeholders)
                for part in container["command"] + container.get("args", [])]
        log = work / f"{name}.log"
        code, usage = self.pod.run_measured(argv, work, env, log)
        # The kubelet kills the container at its memory limit: nothing after it runs.
        check_memory(name, resources or {"limits": {}},
                     usage.peak_rss_bytes if usage else None)
        logs = self._write_executor_logs(outputs, log, work)
        if code != 0:
            tail = "\n    ".join(log.read_text(errors="replace").splitlines()[-25:])
            recorded = (self._upload(name, logs, {}, work, env) if self.backend.logs_on_failure
                        else {})
            raise TaskFailed(f"task {name} exited with {code} (log: {log}); its last lines:\n"
                             f"    {tail}", recorded)
        output = _executor_output(_host_path(executor_input["outputs"]["outputFile"], work))
        parameters = _output_parameters(name, executor_input["outputs"], output, component,
                                        work)
        return Launched(log, self._upload(name, outputs, output, work, env), parameters, usage)

    def _write_executor_logs(self, outputs: dict, log: Path, work: Path) -> dict:
        """getLogWriter: the command's stdout and stderr, teed into the executor-logs
        artifact's local path (when it has one); the artifact is the launcher's own, never the
        step's. Returns {executor-logs: its listing} or {}."""
        if EXECUTOR_LOGS not in outputs:
            return {}
        local = local_path(outputs[EXECUTOR_LOGS]["artifacts"][0]["uri"], work)
        if local is not None:
            shutil.copyfile(log, local)
        return {EXECUTOR_LOGS: outputs[EXECUTOR_LOGS]}

    def _upload(self, name: str, outputs: dict, output: dict, work: Path,
                env: dict[str, str]) -> dict[str, dict]:
        """uploadOutputArtifacts: each output merged with what the ExecutorOutput says of it
        (mergeRuntimeArtifacts: its URI and metadata; from 2.16.1 not executor-logs'), its
        local folder uploaded (a missing one only logs a warning), then recorded
        (metadata/client.go RecordArtifact)."""
        recorded = {}
        for key, listed in outputs.items():
            artifact = json.loads(json.dumps(listed["artifacts"][0]))
            if not (key == EXECUTOR_LOGS and self.backend.logs_not_merged):
                written = output.get("artifacts", {}).get(key, {}).get("artifacts", [{}])[0]
                artifact["uri"] = written.get("uri") or artifact["uri"]
                artifact["metadata"] = {**artifact.get("metadata", {}),
                                        **written.get("metadata", {})}
            local = local_path(artifact["uri"], work)
            if local is not None and transfers(artifact["uri"]):
                if local.exists():
                    self.store.upload(local, artifact["uri"], env)
                else:
                    self.echo(f"    {name}: Local filepath {str(local)!r} does not exist "
                              "(the launcher's warning: nothing uploaded)")
            recorded[key] = self.metadata.record_artifact(
                key, artifact, session_info(self.root, self.backend, self.store.launcher_config))
        return recorded


def _host_path(pod_path: str, work: Path) -> Path:
    """A path in the pod's own /tmp/kfp or /tmp/kfp_outputs (pod.py mounts them) on this
    machine; any other path is the same here."""
    path = Path(pod_path)
    own = path.parts[1:3] in (("tmp", "kfp"), ("tmp", "kfp_outputs"))
    return work / "tmp" / path.relative_to("/tmp") if own else path


def _placeholders(executor_input: dict, executor_input_json: str, work: Path) -> dict[str, str]:
    """component/launcher_v2.go getPlaceholders."""
    found = {"{{$}}": executor_input_json}
    for side in ("inputs", "outputs"):
        for key, listed in executor_input[side]["artifacts"].items():
            uri = listed["artifacts"][0]["uri"]
            found[f"{{{{$.{side}.artifacts['{key}'].uri}}}}"] = uri
            found[f"{{{{$.{side}.artifacts['{key}'].path}}}}"] = str(local_path(uri, work) or uri)
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


def _substitute(text: str, placeholders: dict[str, str]) -> str:
    for placeholder, value in placeholders.items():
        text = text.replace(placeholder, value)
    return text


def _with_defaults(executor_input: dict, component: dict) -> dict:
    copy = json.loads(json.dumps(executor_input))
    values = copy["inputs"]["parameterValues"]
    for key, definition in component.get("inputDefinitions", {}).get("parameters", {}).items():
        if key not in values and "defaultValue" in definition:
            values[key] = definition["defaultValue"]
    return copy


def _executor_output(path: Path) -> dict:
    """component/launcher_v2.go getExecutorOutputFile: no file is an empty ExecutorOutput."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    if not path.is_file():
        return {}
    message = json_format.Parse(path.read_text(), pipeline_spec_pb2.ExecutorOutput())
    return json_format.MessageToDict(message)


def _output_parameters(name: str, outputs: dict, output: dict, component: dict,
                       work: Path) -> dict:
    """component/launcher_v2.go collectOutputParameters: the ExecutorOutput first, else each
    parameter's file, typed (metadata.TextToPbValue)."""
    types = component.get("outputDefinitions", {}).get("parameters", {})
    values = dict(output.get("parameterValues", {}))
    for key, spec in outputs["parameters"].items():
        if key in values:
            continue
        path = _host_path(spec["outputFile"], work)
        if not path.is_file():
            raise TaskFailed(f"task {name}: failed to read output parameter name={key!r} "
                             f"path={spec['outputFile']!r}: no such file")
        values[key] = _typed(path.read_text(), types[key].get("parameterType", "STRING"))
    return values


def _typed(text: str, parameter_type: str):
    if parameter_type in ("NUMBER_INTEGER", "NUMBER_DOUBLE"):
        return float(text)
    if parameter_type == "BOOLEAN":
        return text.strip().lower() == "true"
    if parameter_type in ("LIST", "STRUCT"):
        return json.loads(text)
    return text
