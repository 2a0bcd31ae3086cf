"""Runs a compiled KFP v2 PipelineSpec here, task by task, as open-source KFP's launcher would.

    python -m pipeline.kubeflow.conformance SPEC.yaml --pipeline-root DIR [--until TASK] [--vertex]
        [--python-bin DIR] [--env KEY=VALUE] [--no-cache]

For each task, in dependency order, it does what KFP's driver and launcher do
(backend/src/v2/driver, backend/src/v2/component/launcher_v2.go): resolve the inputs (constants,
upstream output parameters, upstream artifacts with the metadata their step wrote), provision
output URIs under the pipeline root, compute the cache key from the same fields and reuse a cached
execution, or else run the container's command with `{{$}}` (the ExecutorInput JSON) and the other
placeholders substituted, then read the ExecutorOutput the step wrote.

What differs from a cluster, on purpose: steps run one at a time in this machine's Python (the
image's, on a cluster; --python-bin picks another environment) with a bare environment, the
pipeline root is a local folder, and KFP's cache and ML Metadata are JSON files under
<pipeline root>/.kfp_local/. Open-source KFP ignores `lifecycle.preCacheCheck` hooks, and so does
this runner; --vertex runs them first, as Vertex AI does.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import yaml

STATE_DIR = ".kfp_local"
TASK_KEYS = {"taskInfo", "componentRef", "inputs", "dependentTasks", "cachingOptions"}


class SpecError(ValueError):
    """The spec is not one this runner (or open-source KFP) can run; the message says where."""


class TaskFailed(RuntimeError):
    """A step exited non-zero; the message holds the end of its log."""


@dataclasses.dataclass
class TaskResult:
    name: str
    status: str  # "ran" or "cached"
    seconds: float
    artifacts: Dict[str, dict]  # output key -> RuntimeArtifact (JSON form)
    parameters: Dict[str, object]
    log: Optional[Path] = None


@dataclasses.dataclass
class RunResult:
    run_id: str
    tasks: Dict[str, TaskResult]

    def names(self, status: str) -> List[str]:
        return [n for n, t in self.tasks.items() if t.status == status]


def load_spec(path: Path) -> dict:
    """The spec as a dict, after checking that it parses as a KFP PipelineSpec."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = yaml.safe_load(Path(path).read_text())
    try:
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    except json_format.ParseError as error:
        raise SpecError(f"{path} is not a KFP PipelineSpec: {error}") from None
    return spec


def task_order(tasks: Dict[str, dict], until: Optional[str] = None) -> List[str]:
    """Tasks in dependency order (ties by name); with until, only it and what it needs."""
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
    order: List[str] = []
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


class LocalRunner:
    def __init__(self, spec: dict, pipeline_root: Path, python_bin: Optional[Path] = None,
                 env: Optional[Dict[str, str]] = None, cache: bool = True, vertex: bool = False,
                 echo=print, timeout_s: int = 3600):
        self.spec, self.root = spec, Path(pipeline_root).resolve()
        self.name = spec["pipelineInfo"]["name"]
        self.python_bin = Path(python_bin or Path(sys.executable).parent)
        self.env, self.cache, self.vertex = dict(env or {}), cache, vertex
        self.echo, self.timeout_s = echo, timeout_s
        self.state = self.root / STATE_DIR
        self.results: Dict[str, TaskResult] = {}

    def run(self, until: Optional[str] = None, run_id: Optional[str] = None) -> RunResult:
        """Runs the tasks in order; stops at the first failure, as KFP fails the run."""
        run_id = run_id or time.strftime("run-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        tasks = self.spec["root"]["dag"]["tasks"]
        order = task_order(tasks, until)
        try:
            for name in order:
                self.results[name] = self._task(run_id, name, tasks[name])
        finally:
            self._write_record(run_id, order)
        return RunResult(run_id, dict(self.results))

    def _write_record(self, run_id: str, order: List[str]) -> None:
        """The run's details, as KFP's UI shows them: each task's state and outputs."""
        record = {name: dataclasses.asdict(self.results[name]) if name in self.results
                  else {"name": name, "status": "not run"} for name in order}
        path = self.state / "runs" / f"{run_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"run_id": run_id, "pipeline": self.name, "tasks": record},
                                   indent=1, default=str))

    # -- one task: what KFP's driver does, then what its launcher does

    def _task(self, run_id: str, name: str, task: dict) -> TaskResult:
        unknown = set(task) - TASK_KEYS
        if unknown:
            raise SpecError(f"task {name}: {sorted(unknown)} is not supported here")
        component = self.spec["components"][task["componentRef"]["name"]]
        executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
        if set(executor) != {"container"}:
            raise SpecError(f"task {name}: a {'/'.join(executor)} executor; only containers run "
                            "here (open-source KFP has no resolver executor at all)")
        container = executor["container"]
        started = time.monotonic()
        work = self.state / "pods" / run_id / name  # the pod's local disk
        executor_input = {"inputs": self._inputs(name, task, component),
                          "outputs": self._outputs(run_id, name, component, work)}
        hook = container.get("lifecycle", {}).get("preCacheCheck")
        if hook and self.vertex:
            self.echo(f"  > {name}: pre-cache check ({' '.join(hook['command'][-1:])}) ...")
            self._exec(name + ".preCacheCheck", hook, container, executor_input, work)
            self._merge_pre_cache_check(executor_input)
        elif hook:
            self.echo(f"  ! {name}: lifecycle.preCacheCheck ignored, as open-source KFP does")
        fingerprint = self._fingerprint(executor_input, component, container)
        cached = self._cached(fingerprint) if task.get("cachingOptions", {}).get(
            "enableCache") and self.cache else None
        if cached is not None:
            self.echo(f"  ✓ {name} (from cache)")
            return TaskResult(name, "cached", time.monotonic() - started, cached["artifacts"],
                              cached["parameters"])
        self.echo(f"  > {name} ...")
        log = self._exec(name, container, container, executor_input, work)
        output = self._executor_output(executor_input["outputs"]["outputFile"])
        artifacts = self._record_artifacts(executor_input["outputs"], output)
        parameters = self._output_parameters(name, executor_input["outputs"], output, component)
        seconds = time.monotonic() - started
        self.echo(f"  ✓ {name} {seconds:.1f}s")
        self._store(fingerprint, name, run_id, artifacts, parameters)
        return TaskResult(name, "ran", seconds, artifacts, parameters, log)

    def _inputs(self, name: str, task: dict, component: dict) -> dict:
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
            artifacts[key] = {"artifacts": [
                self.results[ref["producerTask"]].artifacts[ref["outputArtifactKey"]]]}
        for key, definition in component.get("inputDefinitions", {}).get(
                "parameters", {}).items():
            if key not in values and "defaultValue" in definition:
                values[key] = definition["defaultValue"]
            elif key not in values and not definition.get("isOptional"):
                raise SpecError(f"task {name}: no value for its input parameter {key}")
        return {"parameterValues": values, "artifacts": artifacts}

    def _outputs(self, run_id: str, name: str, component: dict, work: Path) -> dict:
        definitions = component.get("outputDefinitions", {})
        task_root = f"{self.root}/{self.name}/{run_id}/{name}/{uuid.uuid4().hex[:8]}"
        return {
            "artifacts": {key: {"artifacts": [{
                "uri": f"{task_root}/{key}", "type": d["artifactType"],
                "metadata": d.get("metadata", {})}]}
                for key, d in definitions.get("artifacts", {}).items()},
            "parameters": {key: {"outputFile": str(work / "outputs" / key)}
                           for key in definitions.get("parameters", {})},
            # The launcher's /tmp/kfp_outputs/output_metadata.json, inside this pod's disk.
            "outputFile": str(work / "kfp_outputs" / "output_metadata.json")}

    def _merge_pre_cache_check(self, executor_input: dict) -> None:
        """Vertex: the hook's ExecutorOutput updates the task's parameters and outputs."""
        output = self._executor_output(executor_input["outputs"]["outputFile"])
        executor_input["inputs"]["parameterValues"].update(output.get("parameterValues", {}))
        for key, listed in output.get("artifacts", {}).items():
            target = executor_input["outputs"]["artifacts"][key]["artifacts"][0]
            target.setdefault("metadata", {}).update(listed["artifacts"][0].get("metadata", {}))

    def _fingerprint(self, executor_input: dict, component: dict, container: dict) -> str:
        """KFP's cache key (cacheutils.GenerateCacheKey): input artifact names, input
        parameter values, output specs without URIs, image, command and args."""
        inputs, outputs = executor_input["inputs"], executor_input["outputs"]
        key = {
            "inputArtifactNames": {k: [a["name"] for a in v["artifacts"]]
                                   for k, v in inputs["artifacts"].items()},
            "inputParameterValues": inputs["parameterValues"],
            "outputArtifactsSpec": {k: {"type": v["artifacts"][0]["type"],
                                        "metadata": v["artifacts"][0].get("metadata", {})}
                                    for k, v in outputs["artifacts"].items()},
            "outputParametersSpec": {
                k: d.get("parameterType") for k, d in component.get(
                    "outputDefinitions", {}).get("parameters", {}).items()},
            "containerSpec": {"image": container["image"],
                              "cmdArgs": container["command"] + container.get("args", []),
                              "env": container.get("env", [])}}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()

    def _cached(self, fingerprint: str) -> Optional[dict]:
        path = self.state / "cache" / self.name / f"{fingerprint}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def _store(self, fingerprint, name, run_id, artifacts, parameters) -> None:
        path = self.state / "cache" / self.name / f"{fingerprint}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"task": name, "run_id": run_id, "artifacts": artifacts,
                                    "parameters": parameters}, indent=1))

    def _exec(self, name: str, command_spec: dict, container: dict, executor_input: dict,
              work: Path) -> Path:
        """Runs the command as the launcher does: placeholders substituted, a bare env."""
        from google.protobuf import json_format
        from kfp.pipeline_spec import pipeline_spec_pb2

        # Through the proto, so a malformed ExecutorInput fails here, not in the step.
        message = json_format.ParseDict(executor_input, pipeline_spec_pb2.ExecutorInput())
        placeholders = _placeholders(executor_input, json_format.MessageToJson(message,
                                                                               indent=None))
        argv = [_substitute(part, placeholders)
                for part in command_spec["command"] + command_spec.get("args", [])]
        for folder in ("home", "kfp_outputs", "outputs"):
            (work / folder).mkdir(parents=True, exist_ok=True)
        env = {"PATH": f"{self.python_bin}:/usr/local/bin:/usr/bin:/bin",
               "HOME": str(work / "home"), "LANG": "C.UTF-8",
               **{e["name"]: e["value"] for e in container.get("env", [])}, **self.env}
        log = work / f"{name}.log"
        with open(log, "w") as out:
            code = subprocess.run(argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=self.timeout_s).returncode
        if code != 0:
            tail = "\n    ".join(log.read_text(errors="replace").splitlines()[-25:])
            raise TaskFailed(f"task {name} exited with {code} (log: {log}); its last lines:\n"
                             f"    {tail}")
        return log

    @staticmethod
    def _executor_output(path: str) -> dict:
        from google.protobuf import json_format
        from kfp.pipeline_spec import pipeline_spec_pb2

        if not Path(path).is_file():
            return {}
        message = json_format.Parse(Path(path).read_text(), pipeline_spec_pb2.ExecutorOutput(),
                                    ignore_unknown_fields=True)
        return json_format.MessageToDict(message)

    def _record_artifacts(self, outputs: dict, output: dict) -> Dict[str, dict]:
        """What the launcher records in ML Metadata and the driver hands downstream: URI and
        metadata merged from the step's ExecutorOutput, a new id as the artifact's name."""
        recorded = {}
        for key, listed in outputs["artifacts"].items():
            artifact = json.loads(json.dumps(listed["artifacts"][0]))
            written = output.get("artifacts", {}).get(key, {}).get("artifacts", [{}])[0]
            artifact["uri"] = written.get("uri") or artifact["uri"]
            artifact.setdefault("metadata", {}).update(written.get("metadata", {}))
            artifact["metadata"].setdefault("display_name", key)
            artifact["name"] = self._next_artifact_id()
            if "schemaTitle" in artifact["type"]:  # MLMD gives it back as an instance schema
                artifact["type"] = {"instanceSchema": f"title: {artifact['type']['schemaTitle']}"}
            recorded[key] = artifact
        return recorded

    def _next_artifact_id(self) -> str:
        counter = self.state / "last_artifact_id"
        counter.parent.mkdir(parents=True, exist_ok=True)
        value = int(counter.read_text()) + 1 if counter.is_file() else 1
        counter.write_text(str(value))
        return str(value)

    @staticmethod
    def _output_parameters(name: str, outputs: dict, output: dict, component: dict) -> dict:
        """From the ExecutorOutput first, else from each parameter's output file, typed."""
        types = component.get("outputDefinitions", {}).get("parameters", {})
        values = dict(output.get("parameterValues", {}))
        for key, spec in outputs["parameters"].items():
            if key in values:
                continue
            path = Path(spec["outputFile"])
            if not path.is_file():
                raise TaskFailed(f"task {name} wrote no value for its output parameter {key}")
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


def _placeholders(executor_input: dict, executor_input_json: str) -> Dict[str, str]:
    """The launcher's placeholders (getPlaceholders); with a local root, a path is the URI."""
    found = {"{{$}}": executor_input_json}
    for side in ("inputs", "outputs"):
        for key, listed in executor_input[side]["artifacts"].items():
            uri = listed["artifacts"][0]["uri"]
            found[f"{{{{$.{side}.artifacts['{key}'].uri}}}}"] = uri
            found[f"{{{{$.{side}.artifacts['{key}'].path}}}}"] = uri
    for key, value in executor_input["inputs"]["parameterValues"].items():
        text = value if isinstance(value, str) else json.dumps(value)
        if isinstance(value, float) and value.is_integer():
            text = str(int(value))
        found[f"{{{{$.inputs.parameters['{key}']}}}}"] = text
    for key, spec in executor_input["outputs"]["parameters"].items():
        found[f"{{{{$.outputs.parameters['{key}'].output_file}}}}"] = spec["outputFile"]
    return found


def _substitute(text: str, placeholders: Dict[str, str]) -> str:
    for placeholder, value in placeholders.items():
        text = text.replace(placeholder, value)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow.conformance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="compiled PipelineSpec YAML")
    parser.add_argument("--pipeline-root", type=Path, required=True,
                        help="local folder for the artifacts (and this runner's cache)")
    parser.add_argument("--until", help="run only this task and the tasks it needs")
    parser.add_argument("--vertex", action="store_true",
                        help="run lifecycle.preCacheCheck hooks first, as Vertex AI does")
    parser.add_argument("--python-bin", type=Path,
                        help="folder whose `python` runs the steps (default: this one's)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for every step (the image's ENV)")
    parser.add_argument("--no-cache", action="store_true", help="run every task")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    try:
        spec = load_spec(args.spec)
        print(f"Running {args.spec} locally as open-source KFP would "
              f"(pipeline root {args.pipeline_root})")
        result = LocalRunner(spec, args.pipeline_root, args.python_bin, env,
                             cache=not args.no_cache, vertex=args.vertex).run(args.until)
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (TaskFailed, subprocess.TimeoutExpired) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Run {result.run_id} succeeded\n  ran:        {', '.join(result.names('ran')) or '-'}"
          f"\n  from cache: {', '.join(result.names('cached')) or '-'}\n  details:    "
          f"{args.pipeline_root.resolve() / STATE_DIR / 'runs' / (result.run_id + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
