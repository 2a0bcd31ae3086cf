"""TFX 1.16's ImportSchemaGen executor (tfx/components/schema_gen/import_schema_gen/executor.py),
line for line, without its module's imports.

TFX's module imports tfx.components.schema_gen.executor for one constant (the file name), and
that module imports TFDV and, through TFDV, Beam: ~1.5 s of a Kubeflow step's start-up
(bench/step_startup.py) for a step that copies one file. The keys and the file name are TFX's
(tests/components/test_import_schema.py compares them with TFX's modules).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils

SCHEMA_FILE_KEY = "schema_file"  # standard_component_specs.SCHEMA_FILE_KEY
SCHEMA_KEY = "schema"  # standard_component_specs.SCHEMA_KEY
DEFAULT_FILE_NAME = "schema.pbtxt"  # tfx.components.schema_gen.executor.DEFAULT_FILE_NAME


class Executor(base_executor.BaseExecutor):
    """ImportSchemaGen's executor: the schema file, checked, copied into the Schema artifact."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],  # noqa: N802 (TFX's name)
           output_dict: Dict[str, List[types.Artifact]],
           exec_properties: Dict[str, Any]) -> None:
        source_file_path = exec_properties.get(SCHEMA_FILE_KEY)
        if not source_file_path:
            raise ValueError("Schema file path is missing in exec_properties.")
        output_uri = os.path.join(artifact_utils.get_single_uri(output_dict[SCHEMA_KEY]),
                                  DEFAULT_FILE_NAME)

        # Check whether the input file has a proper schema proto.
        _ = io_utils.SchemaReader().read(source_file_path)

        io_utils.copy_file(source_file_path, output_uri)
        logging.info("Copied a schema file from %s to %s.", source_file_path, output_uri)
