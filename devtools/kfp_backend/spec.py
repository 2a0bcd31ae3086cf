"""What a run is given: the compiled spec (as the API server parses it on upload) and the
Kubernetes objects the driver and the kubelet read (the kfp-launcher ConfigMap, Secrets,
ConfigMaps), each from YAML as `kubectl get -o yaml` prints it."""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from core import yaml_text
from devtools.kfp_backend.errors import SpecError

LAUNCHER_CONFIGMAP = "kfp-launcher"  # config/env.go: configMapName


def load_spec(path: Path) -> tuple[dict, dict | None]:
    """(PipelineSpec, kubernetes PlatformSpec or None), after checking both parse as protos."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    documents = [d for d in yaml_text.load_all(Path(path).read_text()) if d is not None]
    if not documents:
        raise SpecError(f"{path} is empty")
    spec, platform = documents[0], (documents[1] if len(documents) > 1 else None)
    try:
        json_format.ParseDict(_without_string_resources(spec), pipeline_spec_pb2.PipelineSpec())
        if platform is not None:
            json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    except json_format.ParseError as error:
        raise SpecError(f"{path} is not a KFP PipelineSpec (+ PlatformSpec): {error}") from None
    return spec, platform


# ResourceSpec's string fields, which the backends' proto has (api/v2alpha1/pipeline_spec.proto
# at 2.4.1 on) and kfp-pipeline-spec 0.2.2, the one kfp 2.5.0 pins here, lacks.
STRING_RESOURCES = ("resourceCpuLimit", "resourceCpuRequest", "resourceMemoryLimit",
                    "resourceMemoryRequest")


def _without_string_resources(spec: dict) -> dict:
    """spec as the installed proto can check it: the string resource fields (resources.py
    reads them) set aside, when they are strings."""
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    if not any(isinstance((e.get("container") or {}).get("resources", {}).get(k), str)
               for e in executors.values() if isinstance(e, dict) for k in STRING_RESOURCES):
        return spec
    spec = json.loads(json.dumps(spec))
    for executor in spec["deploymentSpec"]["executors"].values():
        resources = (executor.get("container") or {}).get("resources") or {}
        for key in STRING_RESOURCES:
            if isinstance(resources.get(key), str):
                resources.pop(key)
    return spec


def read_launcher_config(path: Path) -> dict:
    """The kfp-launcher ConfigMap, as `kubectl get cm kfp-launcher -o yaml` prints it."""
    config = yaml_text.load(Path(path).read_text())
    if not isinstance(config, dict) or config.get("kind") != "ConfigMap":
        raise SpecError(f"{path}: not a Kubernetes ConfigMap (kind: ConfigMap)")
    name = (config.get("metadata") or {}).get("name")
    if name != LAUNCHER_CONFIGMAP:
        raise SpecError(f"{path}: the ConfigMap is named {name!r}; the driver reads only "
                        f"{LAUNCHER_CONFIGMAP!r} (config/env.go FromConfigMap)")
    return config


def read_secrets(path: Path) -> dict[str, dict[str, str]]:
    """Kubernetes Secret objects (one per YAML document, or a List) -> {name: {key: value}}."""
    return _read_objects(path, "Secret")


def read_config_maps(path: Path) -> dict[str, dict[str, str]]:
    """Kubernetes ConfigMap objects -> {name: {key: value}}."""
    return _read_objects(path, "ConfigMap")


def _read_objects(path: Path, kind: str) -> dict[str, dict[str, str]]:
    found = {}
    for document in yaml_text.load_all(Path(path).read_text()):
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


# The placeholders the template's configs ship (configs/pipeline.yaml: gs://YOUR_BUCKET/...).
PLACEHOLDER = re.compile(r"YOUR_[A-Z0-9_]+")
# Where pipeline.kubeflow.client.compiler puts each kubeflow path of the config in the spec: a
# task's input parameter, or a key of the config the run report step gets (its `config` parameter).
PARAMETER_KEYS = {"input_base": "kubeflow.input_base", "model_base_path": "kubeflow.serving_dir",
                  "push_destination": "kubeflow.serving_dir",
                  "schema_file": "kubeflow.schema_file", "schema_hint": "kubeflow.schema_file"}
REPORT_CONFIG_KEYS = {"data.input_base": "kubeflow.input_base",
                      "serving.serving_dir": "kubeflow.serving_dir",
                      "runner.output_dir": "kubeflow.pipeline_root",
                      "schema_file": "kubeflow.schema_file"}
RUN_ROOT = "--pipeline-root (or the kfp-launcher ConfigMap's defaultPipelineRoot)"


def placeholder_paths(spec: dict, root: str) -> dict[str, dict[str, list[str]]]:
    """Paths of the run that still hold a placeholder (YOUR_BUCKET): {the config key (or
    option) to set: {value: [where: the run, the spec's defaultPipelineRoot, task NAME]}}. No
    step could open them: on a cluster the first step that does fails on an unresolvable
    bucket; here the run is refused before any.
    The spec's defaultPipelineRoot is not the run's (driver.pipeline_root) but it is
    kubeflow.pipeline_root, which the run report step is given too."""
    found: dict[str, dict[str, list[str]]] = {}

    def note(key: str, value: str, where: str) -> None:
        places = found.setdefault(key, {}).setdefault(value, [])
        if where not in places:
            places.append(where)

    if PLACEHOLDER.search(root):
        note(RUN_ROOT, root, "the run")
    default_root = spec.get("defaultPipelineRoot") or ""
    if PLACEHOLDER.search(default_root):
        note("kubeflow.pipeline_root", default_root, "the spec's defaultPipelineRoot")
    for task_name, task in sorted(dag_tasks(spec)[0].items()):
        for param, source in sorted(task.get("inputs", {}).get("parameters", {}).items()):
            constant = source.get("runtimeValue", {}).get("constant")
            for path, value in _strings(_parsed(constant)):
                if "/" not in value or not PLACEHOLDER.search(value):
                    continue  # only paths: a feature may be called YOUR_SCORE
                dotted = ".".join(path)
                key = (PARAMETER_KEYS.get(param) if not path or param in PARAMETER_KEYS
                       else REPORT_CONFIG_KEYS.get(dotted)
                       or (dotted if dotted.startswith("kubeflow.") else None))
                note(key or f"the config value behind task {task_name}'s {param}"
                     + (f" ({dotted})" if path else ""), value, f"task {task_name}")
    return found


def refuse_placeholder_paths(spec: dict, root: str) -> None:
    """SpecError naming each key to set, when placeholder_paths finds any."""
    found = placeholder_paths(spec, root)
    if not found:
        return
    lines = [f"{key}: {value} (in {_places(where)})"
             for key, values in found.items() for value, where in values.items()]
    raise SpecError(
        "the run's paths still hold placeholders, which no step can open (on a cluster the "
        "first step that opens one fails on an unresolvable bucket); nothing was run. Set "
        "each below: a kubeflow.* key in the config, then compile again (python -m "
        "pipeline.run --runner kubeflow); for a run here, local folders do "
        "(tests/helpers.py kubeflow_local_changes has the set):\n"
        "  " + "\n  ".join(lines))


def _places(where: list[str]) -> str:
    tasks = [w.removeprefix("task ") for w in where if w.startswith("task ")]
    named = [w for w in where if not w.startswith("task ")]
    if tasks:
        named.append(f"task{'s' if len(tasks) > 1 else ''} {', '.join(tasks)}")
    return ", ".join(named)


def _parsed(constant):
    """A parameter's constant, JSON text (a proto or the report's config) parsed."""
    if isinstance(constant, str) and constant.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(constant)
        except ValueError:
            return constant
    return constant


def _strings(node, path: tuple = ()):
    """(key path, text) of every string in node."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(value, (*path, str(key)))
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value, path)
    elif isinstance(node, str):
        yield path, node


# compiler/argocompiler/dag.go: a task with this strategy is an exit task, run as the `exit`
# lifecycle hook of each task it depends on, whatever that task's outcome.
ALL_COMPLETED = "ALL_UPSTREAM_TASKS_COMPLETED"


def is_exit_task(task: dict) -> bool:
    return task.get("triggerPolicy", {}).get("strategy") == ALL_COMPLETED


def dag_tasks(spec: dict) -> tuple[dict[str, dict], dict[str, set]]:
    """(every container task of the run, each DAG task's container tasks), walking the DAG
    components the root's tasks run (compiler/argocompiler/dag.go task: a DAG component is a
    DAG driver and a sub-DAG; kfp's ExitHandler and Condition groups compile to one).

    Each container task is a copy whose dependentTasks are the container tasks it waits for:
    its own upstream tasks, a DAG task among them standing for all of that DAG's tasks, and
    those its enclosing DAG tasks wait for (the sub-DAG's driver depends on them). The spec's
    own dependentTasks stay in `spec`; task names must be unique across DAGs here."""
    leaves: dict[str, dict] = {}
    groups: dict[str, set] = {}

    def walk(tasks: dict, inherited: set) -> set:
        members = {}
        for name, task in tasks.items():
            if task.get("triggerPolicy", {}).get("condition"):
                raise SpecError(f"task {name}: triggerPolicy.condition is not supported here")
            component = spec["components"][task["componentRef"]["name"]]
            members[name] = component
        inside: dict[str, set] = {}
        # DAG tasks first, so a dependency on one stands for its tasks.
        pending = dict(tasks)
        for name in sorted(n for n, c in members.items() if "dag" in c):
            task = pending.pop(name)
            upstream = _expand(_upstream(task), inside, tasks, name)
            inside[name] = walk(members[name]["dag"]["tasks"], inherited | upstream)
            groups[name] = inside[name]
        for name, task in sorted(pending.items()):
            if name in leaves:
                raise SpecError(f"task {name} is in two DAGs: not supported here")
            upstream = _expand(_upstream(task), inside, tasks, name)
            leaves[name] = {**task, "dependentTasks": sorted(upstream | inherited)}
            inside[name] = {name}
        return set().union(*inside.values()) if inside else set()

    walk(spec["root"]["dag"]["tasks"], set())
    return leaves, groups


def _upstream(task: dict) -> set:
    """dependentTasks plus each input's producer (argocompiler/dag.go addImplicitDependencies)."""
    inputs = task.get("inputs", {})
    refs = [*inputs.get("parameters", {}).values(), *inputs.get("artifacts", {}).values()]
    return set(task.get("dependentTasks", [])) | {
        ref[kind]["producerTask"] for ref in refs
        for kind in ("taskOutputParameter", "taskOutputArtifact") if kind in ref}


def _expand(upstream: set, inside: dict, tasks: dict, name: str) -> set:
    expanded = set()
    for dep in upstream:
        if dep not in tasks:
            raise SpecError(f"task {name} depends on {dep!r}, no task of its DAG")
        expanded |= inside.get(dep, {dep})
    return expanded
