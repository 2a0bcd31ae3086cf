"""What the image runs for each step on open-source KFP: TFX's container entrypoint, with the
input artifact types the backend drops put back and the outputs it adds set aside.

    python -m pipeline.kubeflow.step.entrypoint [--night_lease JSON] [--declared_output_artifacts
        JSON_LIST] TFX_MODULE
        --json_serialized_invocation_args {{$}} --json_serialized_inputs_spec_args SPEC
        [the module's other flags and Beam's]

TFX_MODULE is one of TFX 1.16's two container entrypoints the compiled spec names:
`tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor` (every executor) or
`tfx.orchestration.kubeflow.v2.file_based_example_gen.driver` (ExampleGen's driver task).

Why: the open-source driver reads a step's input artifacts back from ML Metadata with an empty
schema (kubeflow/pipelines backend/src/v2/metadata/client.go GetOutputArtifactsByExecutionId,
`Schema: ""`, copied to `type.instanceSchema` by ToRuntimeArtifact, KFP 2.0.5 to 2.5.0). TFX
1.16 builds each artifact's class from that type (kubeflow_v2_entrypoint_utils.py
parse_raw_artifact_dict -> _parse_raw_artifact -> _retrieve_class_path): an empty schema raises
AttributeError, no type UnboundLocalError. So before TFX parses it, each input artifact gets the
type the component declares in its inputDefinitions, which TFX's compiler already passes to the
step as --json_serialized_inputs_spec_args (step_builder.py, pipeline spec 2.1). A type the step
did receive is kept (Vertex AI sends the full one). Then the TFX module's own `main` runs with
the same flags (kubeflow_v2_run_executor._parse_flags / main; driver._parse_flags / main).

And from KFP 2.5.0 the driver adds an output artifact `executor-logs`, typed `system.Artifact`, to
every task when publish_logs is true, the default (backend/src/v2/driver/driver.go
provisionOutputs; cmd/driver/main.go), which TFX 1.16 cannot build (parse_raw_artifact_dict:
`ImportError: Could not import system.Artifact`), so every step would fail before its executor
runs. The compiled spec names the outputs the component declares (--declared_output_artifacts,
pipeline/kubeflow/client/spec.py); any other is the backend's and is set aside before TFX parses the
ExecutorInput. That is all the backend expects of it: the launcher itself tees the step's stdout
and stderr into the file, uploads and records it, whatever the ExecutorOutput says (KFP 2.17.0
component/launcher_v2.go getLogWriter, uploadOutputArtifacts), so the step neither writes it nor
names it in its ExecutorOutput. TFX's own outputs are untouched, and TFX writes its ExecutorOutput
where outputs.outputFile says, which is where each release's launcher reads it
(/tmp/kfp_outputs/output_metadata.json to 2.14, the task root's local folder from 2.15.0).

--night_lease: the step's part in the run's run lease (pipeline/kubeflow/step/run_lease_step.py):
taken before the driver task runs (a run that finds another's stops there), checked by the Pusher,
given back after the run report or a failed step.

Each step records its state in the run's folder (pipeline/kubeflow/step/step_records.py: running,
then succeeded or failed with its error), which the exit step reads.

The step also gets the file systems its paths need (pipeline.kubeflow.step.file_systems.enable) and
ends through core.storage.exit_now, so a step that touched s3:// does not abort at interpreter exit.

Start-up: TFX 1.16's kubeflow_v2_run_executor imports tfx.components.evaluator.executor (TFMA,
Beam) for one issubclass check after the executor ran and base_beam_executor (Beam) for one
before, so the step runs its copy, pipeline/kubeflow/step/run_executor.py, whose checks import
neither. kubeflow_v2_entrypoint_utils imports tfx.components.evaluator.constants, which would run
tfx/components/__init__.py (every TFX component), and standard_component_specs, which would run
TFDV's and TFMA's __init__ (all of both, and Beam): the step defers those three __init__
(pipeline/lazy_tfx.py). deploy/kubeflow/README.md (Step start-up) has the figures.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import sys
import traceback

from core.nodes import CUSTOM_TYPES, REPORT_OUTPUTS

TFX_MODULES = ("tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
               "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver")
INVOCATION_FLAG = "--json_serialized_invocation_args"
INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"
DECLARED_OUTPUTS_FLAG = "--declared_output_artifacts"
# TFX's executor entrypoint, line for line, without its imports of the Evaluator and Beam
# (pipeline/kubeflow/step/run_executor.py says why).
RUN_IN_PLACE_OF = {TFX_MODULES[0]: "pipeline.kubeflow.step.run_executor"}
URI = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")


# The system.* types pipeline/kubeflow/client/spec.py gives the run report's outputs for the KFP
# UI, and the TFX classes the step builds them as (core/nodes.py REPORT_OUTPUTS).
UI_TYPE_CLASSES = {output.kfp_type: output.tfx_class for output in REPORT_OUTPUTS.values()}


class EntrypointError(ValueError):
    """The command line is not one the compiled spec writes; says what is wrong."""


def restore_input_types(executor_input: dict, inputs_spec: dict) -> dict:
    """executor_input (JSON form) with each input artifact's missing or empty type replaced
    by its declared artifactType; an input the spec does not declare is an error."""
    declared = inputs_spec.get("artifacts", {})
    for key, listed in executor_input.get("inputs", {}).get("artifacts", {}).items():
        for artifact in listed.get("artifacts", []):
            kind = artifact.get("type") or {}
            if kind.get("schemaTitle") or kind.get("instanceSchema"):
                continue
            if key not in declared:
                raise EntrypointError(f"input artifact {key!r} arrived without a type and the "
                                      f"step's {INPUTS_SPEC_FLAG} does not declare it")
            artifact["type"] = declared[key]["artifactType"]
    return executor_input


def restore_output_classes(executor_input: dict) -> dict:
    """executor_input with each output typed system.HTML / Markdown / Metrics retitled to its
    TFX class, which TFX 1.16's parser imports by that title (_retrieve_class_path)."""
    for listed in executor_input.get("outputs", {}).get("artifacts", {}).values():
        for artifact in listed.get("artifacts", []):
            title = (artifact.get("type") or {}).get("schemaTitle")
            if title in UI_TYPE_CLASSES:
                artifact["type"] = {"schemaTitle": UI_TYPE_CLASSES[title]}
    return executor_input


def _title(kind: dict) -> str | None:
    if kind.get("schemaTitle"):
        return kind["schemaTitle"]
    for line in (kind.get("instanceSchema") or "").splitlines():
        if line.startswith("title:"):
            return line.partition(":")[2].strip().strip("'\"")
    return None


def restore_custom_classes(executor_input: dict) -> dict:
    """executor_input with each input and output of one of our custom types (core/nodes.py
    CUSTOM_TYPES: release.Status) retitled to its class path, which TFX imports by that title;
    `release.Status` as such is no module."""
    for side in ("inputs", "outputs"):
        for listed in executor_input.get(side, {}).get("artifacts", {}).values():
            for artifact in listed.get("artifacts", []):
                title = _title(artifact.get("type") or {})
                if title in CUSTOM_TYPES:
                    artifact["type"] = {"schemaTitle": CUSTOM_TYPES[title]}
    return executor_input


def set_aside_undeclared_outputs(executor_input: dict, declared: list[str] | None) -> dict:
    """executor_input without the output artifacts its component does not declare (the
    backend's own, such as executor-logs). declared None (a spec compiled without
    --declared_output_artifacts): every output is kept, as TFX's own entrypoint has them."""
    outputs = executor_input.get("outputs", {}).get("artifacts", {})
    if declared is not None:
        for key in sorted(set(outputs) - set(declared)):
            del outputs[key]
    return executor_input


def _declared_outputs(argv: list[str]) -> tuple[list[str] | None, list[str]]:
    """(the declared output keys or None, the rest of argv)."""
    if argv[:1] != [DECLARED_OUTPUTS_FLAG]:
        return None, argv
    try:
        declared = json.loads(argv[1])
    except (IndexError, json.JSONDecodeError):
        declared = None
    if not isinstance(declared, list) or not all(isinstance(k, str) for k in declared):
        raise EntrypointError(f"{DECLARED_OUTPUTS_FLAG} takes a JSON list of output keys, "
                              f"got {argv[1:2]}")
    return declared, argv[2:]


def _flag(argv: list[str], flag: str) -> int:
    for index, value in enumerate(argv):
        if value == flag and index + 1 < len(argv):
            return index + 1
        if value.startswith(flag + "="):
            raise EntrypointError(f"{flag}=VALUE: the compiled spec passes {flag} VALUE")
    raise EntrypointError(f"no {flag} in the command line")


def prepare(argv: list[str]) -> tuple[str, list[str], list[str]]:
    """(TFX module, its argv with the types restored and the undeclared outputs set aside,
    the URIs the step will touch)."""
    declared, argv = _declared_outputs(list(argv))
    if not argv or argv[0] not in TFX_MODULES:
        raise EntrypointError(f"first argument {argv[:1]}: expected one of {TFX_MODULES}")
    module, args = argv[0], list(argv[1:])
    at = _flag(args, INVOCATION_FLAG)
    executor_input = json.loads(args[at])
    inputs_spec = json.loads(args[_flag(args, INPUTS_SPEC_FLAG)])
    args[at] = json.dumps(restore_custom_classes(restore_output_classes(
        set_aside_undeclared_outputs(restore_input_types(
            json.loads(json.dumps(executor_input)), inputs_spec), declared))))
    uris = [a.get("uri") for side in ("inputs", "outputs")
            for listed in executor_input.get(side, {}).get("artifacts", {}).values()
            for a in listed.get("artifacts", [])]
    # Paths in the parameters too: input_base, the schema file, the serving dir.
    uris += [v for v in executor_input.get("inputs", {}).get("parameterValues", {}).values()
             if isinstance(v, str) and URI.match(v)]
    return module, args, [u for u in uris if u]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from core import storage
    from pipeline.kubeflow.step import file_systems, run_lease_step


    try:
        lease, argv = run_lease_step.split_flag(argv)  # the run's lease (core/run_lease.py)
        module_name, args, uris = prepare(argv)
        file_systems.enable(uris)
        if module_name == TFX_MODULES[0]:
            # Its unknown flags are Beam's: the S3 endpoint and region from the pod's env, for
            # Beam's own S3 file system (the credentials boto3 reads from the env itself).
            args += storage.beam_s3_args(os.environ)
    except (EntrypointError, run_lease_step.LeaseFlagError, storage.StorageError,
            json.JSONDecodeError) as error:
        print(f"error: {error}", file=sys.stderr)
        storage.exit_now(2)
    executor_input = json.loads(argv[_flag(argv, INVOCATION_FLAG)])  # as the launcher gave it
    stop = run_lease_step.before(lease, executor_input)
    if stop:  # another run holds the lease: this one ends here, before TensorFlow loads
        print(f"error: {stop}", file=sys.stderr)
        storage.exit_now(1)
    from absl import app

    from pipeline.lazy_tfx import STEP_DEFERRED_PACKAGES, defer_tfx_packages

    defer_tfx_packages(STEP_DEFERRED_PACKAGES)
    module = importlib.import_module(RUN_IN_PLACE_OF.get(module_name, module_name))
    from tensorflow.io import gfile  # TFX's module imported TensorFlow

    from pipeline.kubeflow.step import step_records


    # The ExecutorInput as the driver wrote it: a step with no output of its own (a gate) still
    # has the backend's executor-logs (2.5.0+), under the run's folder.
    where = step_records.place(executor_input)
    step_records.write_quietly(gfile, where, step_records.RUNNING)
    code, error = 0, None
    try:
        # Exactly what `python -m MODULE ARGS` runs (the module's `__main__` block).
        app.run(module.main, argv=[module.__file__, *args], flags_parser=module._parse_flags)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        error = f"exited with {exit_.code}" if code else None
    except Exception as failure:  # noqa: BLE001  (the step failed: its traceback is the log)
        traceback.print_exc()
        code, error = 1, step_records.error_text(failure)
    outputs = None if code else step_records.executor_outputs(gfile, executor_input)
    step_records.write_quietly(gfile, where, step_records.FAILED if code else
                               step_records.SUCCEEDED, error, outputs)
    run_lease_step.after(lease, executor_input, code)
    storage.exit_now(code)
    return code


if __name__ == "__main__":
    main()
