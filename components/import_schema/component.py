"""The ImportSchemaGen component: TFX's, with the executor of executor.py (the same Do without
TFDV and Beam at import). A subclass with its own EXECUTOR_SPEC, as TFX asks (see
components/pusher/component.py); the same spec, inputs, outputs and node id as TFX's."""
from __future__ import annotations

from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.dsl.components.base import executor_spec

from components.import_schema.executor import Executor


class LightImportSchemaGen(ImportSchemaGen):
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
