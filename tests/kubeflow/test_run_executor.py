"""pipeline/kubeflow/step/run_executor.py, the step's copy of TFX 1.16's Kubeflow V2 executor
entrypoint: the same ExecutorOutput as TFX's module for the same ExecutorInput, and the same
answer to TFX's two class checks without importing Beam or the Evaluator. With
components/import_schema/executor.py, the ImportSchemaGen executor it runs in a step."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tests.helpers import REPO

SCHEMA = REPO / "configs" / "schema.pbtxt"


def run(module, executor_class_path: str, root: Path) -> tuple[dict, bytes]:
    """(the ExecutorOutput with root spelled ROOT, the schema file written) of an
    ImportSchemaGen step, run in-process by `module`'s _run_executor."""
    executor_input = {
        "inputs": {"parameterValues": {"schema_file": str(SCHEMA)}},
        "outputs": {"artifacts": {"schema": {"artifacts": [{
            "name": "schema", "uri": str(root / "schema"),
            "type": {"schemaTitle": "tfx.Schema", "schemaVersion": "0.0.1"}}]}},
            "outputFile": str(root / "output_metadata.json")}}
    inputs_spec = {"parameters": {"schema_file": {"parameterType": "STRING"}}}
    args = argparse.Namespace(executor_class_path=executor_class_path,
                              json_serialized_invocation_args=json.dumps(executor_input),
                              json_serialized_inputs_spec_args=json.dumps(inputs_spec))
    module._run_executor(args, [])
    output = (root / "output_metadata.json").read_text().replace(str(root), "ROOT")
    return json.loads(output), (root / "schema" / "schema.pbtxt").read_bytes()


def test_our_entrypoint_and_executor_write_what_tfx_s_write(tmp_path):
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    from pipeline.kubeflow.step import run_executor


    tfx_output, tfx_schema = run(
        kubeflow_v2_run_executor, "tfx.components.schema_gen.import_schema_gen.executor.Executor",
        tmp_path / "tfx")
    our_output, our_schema = run(run_executor, "components.import_schema.executor.Executor",
                                 tmp_path / "ours")
    assert our_output == tfx_output and our_schema == tfx_schema == SCHEMA.read_bytes()
    assert our_output["artifacts"]["schema"]["artifacts"][0]["uri"] == "ROOT/schema"


def test_the_class_checks_answer_as_tfx_s_issubclass():
    from tfx.components.evaluator import executor as evaluator_executor
    from tfx.components.statistics_gen.executor import Executor as StatisticsGen
    from tfx.dsl.components.base import base_beam_executor

    from components.evaluator.component import Executor as Evaluator
    from components.import_schema.executor import Executor as ImportSchemaGen
    from pipeline.kubeflow.step.run_executor import (BEAM_EXECUTOR_MODULE,
                                                     EVALUATOR_EXECUTOR_MODULE,
                                                     subclass_of_loaded)

    for cls in (StatisticsGen, Evaluator, ImportSchemaGen):
        assert subclass_of_loaded(cls, BEAM_EXECUTOR_MODULE, "BaseBeamExecutor") == issubclass(
            cls, base_beam_executor.BaseBeamExecutor)
        assert subclass_of_loaded(cls, EVALUATOR_EXECUTOR_MODULE, "Executor") == issubclass(
            cls, evaluator_executor.Executor)
    assert subclass_of_loaded(Evaluator, EVALUATOR_EXECUTOR_MODULE, "Executor")
    assert not subclass_of_loaded(ImportSchemaGen, "no.such.module", "Executor")


def test_the_keys_and_file_name_are_tfx_s():
    from tfx.components.schema_gen import executor as schema_gen_executor
    from tfx.types import standard_component_specs

    from components.import_schema import executor
    from pipeline.kubeflow.step import run_executor


    assert run_executor.BLESSING_KEY == standard_component_specs.BLESSING_KEY
    assert executor.SCHEMA_FILE_KEY == standard_component_specs.SCHEMA_FILE_KEY
    assert executor.SCHEMA_KEY == standard_component_specs.SCHEMA_KEY
    assert executor.DEFAULT_FILE_NAME == schema_gen_executor.DEFAULT_FILE_NAME
