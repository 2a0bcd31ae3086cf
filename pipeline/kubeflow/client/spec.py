"""TFX's PipelineSpec (written for Vertex AI) adapted to, and checked against, open-source KFP.

Pure dict -> dict: no TFX or kfp imports, so every rule here is testable on a literal spec.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator

from core import nodes
from core.nodes import REPORT_OUTPUTS
from pipeline.kubeflow.step.entrypoint import DECLARED_OUTPUTS_FLAG
from pipeline.kubeflow.step.run_lease_step import FLAG as LEASE_FLAG

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


ENTRYPOINT = "pipeline.kubeflow.step.entrypoint"
# The run report's outputs as the KFP v2 UI's viewers want them (core/nodes.py REPORT_OUTPUTS).
UI_TYPES = {output.tfx_type: output.kfp_type for output in REPORT_OUTPUTS.values()}


def for_open_source_kfp(spec: dict, pipeline_root: str | None,
                        restore_input_types: bool = True,
                        run_lease_expiry_s: int | None = None) -> dict:
    """TFX's spec (written for Vertex) adapted to what open-source KFP runs (a new dict).

    Every step's command runs TFX's entrypoint through ours (pipeline/kubeflow/step/entrypoint.py),
    which puts back the input artifact types the open-source driver drops and sets aside the
    outputs it adds; without it every step with an input artifact fails (restore_input_types=
    False: the negative control).

    TFX puts the ExampleGen driver, which finds the newest span and fingerprints it, in a
    `lifecycle.preCacheCheck` hook: Vertex runs it before the cache lookup, open-source KFP
    ignores it, and without it the executor finds no span. It becomes a task of its own, never
    cached, whose outputs (span, fingerprint, the span's input_config) are ExampleGen's inputs:
    so ExampleGen's cache key changes exactly when a new span arrives.

    run_lease_expiry_s: every step's entrypoint gets its part in the run lease
    (pipeline/kubeflow/step/run_lease_step.py): the driver task takes it, the Pusher checks it, the
    run report (then never cached, so that it runs every night) releases it. None: no lease.
    """
    spec = copy.deepcopy(spec)
    if pipeline_root:
        # TFX writes artifacts with TensorFlow's gfile: KFP's default MinIO root is not for it.
        spec["defaultPipelineRoot"] = pipeline_root
    tasks = spec["root"]["dag"]["tasks"]
    for name, task in list(tasks.items()):
        if name == nodes.SKEW_CHECK:
            # Requests arrive whether the training data changed or not, and a compiled spec
            # cannot digest them (a local run does: components/skew_gate/executor.py).
            task["cachingOptions"] = {"enableCache": False}
        component = spec["components"][task["componentRef"]["name"]]
        container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
        hook = container.pop("lifecycle", {}).get("preCacheCheck")
        if restore_input_types:
            _through_entrypoint(container, component,
                                _lease_flag(run_lease_expiry_s, name, task))
            if hook:
                _through_entrypoint(hook, component,
                                    _lease_flag(run_lease_expiry_s, name + DRIVER_SUFFIX,
                                                take=True))
        if hook:
            _split_driver(spec, name, task, component, container, hook)
    for component in spec["components"].values():
        _retitle_for_the_ui(component)
    return spec


def _retitle_for_the_ui(component: dict) -> None:
    """report.* outputs (TFX writes a custom type as an instanceSchema titled with its TYPE_NAME)
    become the system.* types the KFP UI renders."""
    for output in component.get("outputDefinitions", {}).get("artifacts", {}).values():
        kind = output.get("artifactType", {})
        title = kind.get("schemaTitle") or _instance_title(kind.get("instanceSchema", ""))
        if title in UI_TYPES:
            output["artifactType"] = {"schemaTitle": UI_TYPES[title], "schemaVersion": "0.0.1"}


def _instance_title(instance_schema: str) -> str | None:
    for line in instance_schema.splitlines():
        if line.startswith("title:"):
            return line.split(":", 1)[1].strip().strip("'\"")
    return None


def _lease_flag(expiry_s: int | None, name: str, task: dict | None = None,
                take: bool = False) -> list[str]:
    """`--night_lease JSON` for task name's entrypoint (run_lease_step.py), [] without a
    lease; the run report, which releases it, is made never cached (a cached step runs nothing)."""
    if expiry_s is None:
        return []
    role = ("take" if take else "push" if name == nodes.PUSHER
            else "release" if name == nodes.RUN_REPORT else "hold")
    if role == "release" and task is not None:
        task["cachingOptions"] = {"enableCache": False}
    return [LEASE_FLAG, json.dumps({"role": role, "task": name, "expiry_s": expiry_s},
                                   sort_keys=True)]


def _through_entrypoint(command_holder: dict, component: dict,
                        lease_flag: list[str] = ()) -> None:
    """`python -m TFX_MODULE` -> `python -m pipeline.kubeflow.step.entrypoint
    --declared_output_artifacts [the component's output keys] TFX_MODULE`: the entrypoint sets
    aside any other output, which the backend added (KFP 2.5.0+: executor-logs)."""
    command = command_holder["command"]
    if command[:2] != ["python", "-m"] or len(command) != 3:
        raise ValueError(f"unexpected step command {command}: expected python -m MODULE")
    declared = sorted(component.get("outputDefinitions", {}).get("artifacts", {}))
    command_holder["command"] = ["python", "-m", ENTRYPOINT, *lease_flag, DECLARED_OUTPUTS_FLAG,
                                 json.dumps(declared), command[2]]


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


def open_source_problems(spec: dict) -> list[str]:
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

