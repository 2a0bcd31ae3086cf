"""TFX 1.16's Kubeflow V2 executor entrypoint (tfx/orchestration/kubeflow/v2/container/
kubeflow_v2_run_executor.py, `_run_executor`, `_parse_flags`, `main`), line for line, importing
only what the step's own executor needs.

TFX's module imports tfx.components.evaluator.executor (TFMA, Beam) for one issubclass check
after Do and tfx.dsl.components.base.base_beam_executor (Beam) for one before it: ~5 s of
every step's start-up, measured in the step image (bench/step_startup.py), for executors that
are neither. A class can subclass those only if their module was imported (by the executor's
own module), so the checks here read them from sys.modules instead: the same answer, no import.
A Beam executor's process is also spared TFX's unused sdist and Beam's boto3 client per S3
call (pipeline/beam_step.py). Everything else (the ExecutorInput parsing, the Context,
the ExecutorOutput written where outputs.outputFile says, the blessing's MLMD names) is TFX's
code, called as TFX calls it.
pipeline/kubeflow/step/entrypoint.py runs this in place of TFX's module the spec names.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Tuple

from absl import logging
from absl.flags import argparse_flags
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
from tfx.orchestration.portable import outputs_utils
from tfx.types import artifact_utils, standard_artifacts, value_artifact
from tfx.utils import import_utils

from core import storage
from pipeline import beam_step


BEAM_EXECUTOR_MODULE = "tfx.dsl.components.base.base_beam_executor"
EVALUATOR_EXECUTOR_MODULE = "tfx.components.evaluator.executor"
BLESSING_KEY = "blessing"  # tfx.types.standard_component_specs.BLESSING_KEY


def subclass_of_loaded(cls: type, module: str, name: str) -> bool:
    """issubclass(cls, module.name), False without importing module when it is not loaded:
    then no class can derive from it."""
    loaded = sys.modules.get(module)
    return loaded is not None and hasattr(loaded, name) and issubclass(cls, getattr(loaded, name))


def _run_executor(args: argparse.Namespace, beam_args: List[str]) -> None:
    """TFX's _run_executor (see the module's docstring for the one difference)."""
    logging.set_verbosity(logging.INFO)

    executor_input = pipeline_spec_pb2.ExecutorInput()
    json_format.Parse(args.json_serialized_invocation_args, executor_input,
                      ignore_unknown_fields=True)
    inputs_spec = None
    if getattr(args, "json_serialized_inputs_spec_args", None):
        inputs_spec = pipeline_spec_pb2.ComponentInputsSpec()
        json_format.Parse(args.json_serialized_inputs_spec_args, inputs_spec,
                          ignore_unknown_fields=True)

    inputs_dict = executor_input.inputs.artifacts
    outputs_dict = executor_input.outputs.artifacts
    inputs_parameter_value = executor_input.inputs.parameter_values
    inputs_parameter = executor_input.inputs.parameters
    outputs_parameters = executor_input.outputs.parameters

    task_root = os.path.dirname(executor_input.outputs.output_file)
    tmp_path = os.path.join(task_root, ".temp")
    task_unique_id = os.path.basename(task_root)

    if fileio.exists(executor_input.outputs.output_file):
        # A driver wrote updated exec_properties there.
        with fileio.open(executor_input.outputs.output_file, "rb") as output_meta_json:
            output_metadata = pipeline_spec_pb2.ExecutorOutput()
            json_format.Parse(output_meta_json.read(), output_metadata,
                              ignore_unknown_fields=True)
            for k, v in output_metadata.parameter_values.items():
                inputs_parameter_value[k].CopyFrom(v)
            for k, v in output_metadata.parameters.items():
                inputs_parameter[k].CopyFrom(v)

    name_from_id = {}
    inputs = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(inputs_dict, name_from_id)
    outputs = kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict(outputs_dict, name_from_id)
    exec_properties = kubeflow_v2_entrypoint_utils.parse_execution_properties(
        inputs_parameter_value, inputs_parameter, inputs_spec)
    logging.info("Executor %s do: inputs: %s, outputs: %s, exec_properties: %s",
                 args.executor_class_path, inputs, outputs, exec_properties)
    executor_cls = import_utils.import_class_by_path(args.executor_class_path)
    if subclass_of_loaded(executor_cls, BEAM_EXECUTOR_MODULE, "BaseBeamExecutor"):
        beam_executor = sys.modules[BEAM_EXECUTOR_MODULE].BaseBeamExecutor
        beam_args = beam_step.prepare(beam_args)  # the second difference (module docstring)
        executor_context = beam_executor.Context(beam_pipeline_args=beam_args,
                                                 unique_id=task_unique_id, tmp_dir=tmp_path)
    else:
        executor_context = base_executor.BaseExecutor.Context(
            extra_flags=beam_args, unique_id=task_unique_id, tmp_dir=tmp_path)
    executor = executor_cls(executor_context)
    logging.info("Starting executor")
    executor.Do(inputs, outputs, exec_properties)

    outputs_utils.tag_output_artifacts_with_version(outputs)

    # TFX's workaround (b/169583143): the ModelBlessing names its models by MLMD resource name.
    if (subclass_of_loaded(executor_cls, EVALUATOR_EXECUTOR_MODULE, "Executor")
            and BLESSING_KEY in outputs):
        kubeflow_v2_entrypoint_utils.refactor_model_blessing(
            artifact_utils.get_single_instance(outputs[BLESSING_KEY]), name_from_id)

    metadata_uri = executor_input.outputs.output_file
    executor_output = pipeline_spec_pb2.ExecutorOutput()
    for k, v in kubeflow_v2_entrypoint_utils.translate_executor_output(
            outputs, name_from_id).items():
        executor_output.artifacts[k].CopyFrom(v)

    for key in outputs_parameters.keys():
        if key not in outputs.keys():
            raise ValueError(
                "All OutputParameters must have corresponding OutputValueArtifacts.")
        assert len(outputs[key]) == 1 and isinstance(
            outputs[key][0], value_artifact.ValueArtifact), (
                "Parameter should have one corresponding ValueArtifact.")
        artifact = outputs[key][0]
        if isinstance(artifact, standard_artifacts.String):
            executor_output.parameter_values[key].string_value = artifact.read()
        elif isinstance(artifact, (standard_artifacts.Float, standard_artifacts.Integer)):
            executor_output.parameter_values[key].number_value = artifact.read()
        elif isinstance(artifact, standard_artifacts.Boolean):
            executor_output.parameter_values[key].bool_value = artifact.read()
        else:
            raise ValueError("Only String, Float, Int, and Boolean ValueArtifacts are supported.")

    storage.makedirs(os.path.dirname(metadata_uri), fileio.makedirs)
    with fileio.open(metadata_uri, "wb") as f:
        f.write(json_format.MessageToJson(executor_output))


def _parse_flags(argv: List[str]) -> Tuple[argparse.Namespace, List[str]]:
    """TFX's flags; the unknown ones are Beam's."""
    parser = argparse_flags.ArgumentParser()
    parser.add_argument("--executor_class_path", type=str, required=True,
                        help="Python class of executor in format of <module>.<class>.")
    parser.add_argument("--json_serialized_invocation_args", type=str, required=True,
                        help="JSON-serialized metadata for this execution.")
    parser.add_argument("--json_serialized_inputs_spec_args", type=str, required=False,
                        help="JSON-serialized component inputs spec for this execution.")
    return parser.parse_known_args(argv)


def main(parsed_argv: Tuple[argparse.Namespace, List[str]]):
    args, beam_args = parsed_argv
    _run_executor(args, beam_args)
