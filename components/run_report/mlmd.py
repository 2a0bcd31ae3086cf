"""A run as ML Metadata records it: its executions, their outputs, and the one reading of an
artifact's custom properties, whichever store and runner wrote them."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from google.protobuf import json_format
from ml_metadata.proto import metadata_store_pb2

# tfx/types/artifact.py _JSON_SINGLE_VALUE_KEY: a scalar TFX wrapped into a struct_value.
TFX_SCALAR_KEY = "__value__"
# kubeflow/pipelines backend/src/v2/metadata/converter.go StructValueToMLMDValue (2.3.0 to
# 2.17.0): a list or a dict of an artifact's metadata, recorded as {"list": [...]} or
# {"struct": {...}}.
KFP_WRAPPERS = ("list", "struct")


def property_value(artifact: metadata_store_pb2.Artifact, key: str):
    """A custom property as the component set it, whichever way it reached this process; None
    when the artifact has none.

    - A local run (TFX's own store): int_value, double_value or string_value, as set.
    - Read from KFP's store: the launcher records an artifact's metadata (converter.go
      toMLMDArtifact -> StructValueToMLMDValue, 2.3.0 to 2.17.0) with every number as a
      double_value (an int 0 becomes 0.0), a bool as an int_value, a list or dict wrapped in a
      struct_value (KFP_WRAPPERS).
    - Inside a KFP step: the driver passes that metadata on as JSON (converter.go
      toRuntimeArtifact) and TFX 1.16 stores each field it does not declare as a property as a
      struct_value {"__value__": value} (kubeflow_v2_entrypoint_utils._parse_raw_artifact,
      artifact._encode_struct_value): a Struct, truthy even when it holds 0.0.
    Whole doubles come back as int (KFP made them doubles).
    """
    value = artifact.custom_properties.get(key)
    kind = value.WhichOneof("value") if value is not None else None
    if kind is None:
        return None
    if kind == "proto_value":
        raise ValueError(f"custom property {key!r} of {artifact.uri} is a packed proto "
                         f"({value.proto_value.type_url}): neither TFX's components here nor "
                         "KFP's launcher write one, so it is not a value this reader knows")
    found = getattr(value, kind)
    if kind == "struct_value":
        found = json_format.MessageToDict(found)
        for wrapper in (TFX_SCALAR_KEY, *KFP_WRAPPERS):
            if isinstance(found, dict) and list(found) == [wrapper]:
                found = found[wrapper]
    return int(found) if isinstance(found, float) and found.is_integer() else found


def flag(artifact, key: str) -> Optional[bool]:
    """A 0/1 custom property (blessed, pushed) as a bool; None when absent. Any other value is
    an error, not a truth value."""
    value = property_value(artifact, key)
    if value is None:
        return None
    if value not in (0, 1):  # True and False are 1 and 0
        raise ValueError(f"custom property {key!r} of {artifact.uri} is {value!r}, not 0 or 1")
    return bool(value)


def latest_run(store) -> metadata_store_pb2.Context:
    runs = store.get_contexts_by_type("pipeline_run")
    if not runs:
        raise LookupError("the metadata store holds no pipeline run")
    return max(runs, key=lambda c: (c.create_time_since_epoch, c.id))


def _node_of(store, execution) -> Optional[str]:
    for context in store.get_contexts_by_execution(execution.id):
        if context.type == "node":  # named "<pipeline>.<node id>"
            return context.name.split(".")[-1]
    return None


def run_outputs(store, run: metadata_store_pb2.Context
                ) -> Dict[Tuple[str, str], metadata_store_pb2.Artifact]:
    """(node id, output key) -> artifact, for every execution of the run."""
    executions = store.get_executions_by_context(run.id)
    node_of = {e.id: _node_of(store, e) or "?" for e in executions}
    events = store.get_events_by_execution_ids([e.id for e in executions])
    outputs = [e for e in events if e.type == metadata_store_pb2.Event.OUTPUT]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in outputs])}
    return {(node_of[e.execution_id], e.path.steps[0].key): artifacts[e.artifact_id]
            for e in outputs if e.path.steps}


def failed_steps(store, run) -> List[str]:
    failed = [e for e in store.get_executions_by_context(run.id)
              if e.last_known_state == metadata_store_pb2.Execution.FAILED]
    return [node for node in (_node_of(store, e) for e in failed) if node]


def runs_of_pipeline(store, pipeline_name: str) -> List[metadata_store_pb2.Context]:
    """The pipeline's runs, oldest first (a run's executions carry the pipeline's context)."""
    pipeline = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if pipeline is None:
        return []
    executions = {e.id for e in store.get_executions_by_context(pipeline.id)}
    runs = [run for run in store.get_contexts_by_type("pipeline_run")
            if any(e.id in executions for e in store.get_executions_by_context(run.id))]
    return sorted(runs, key=lambda c: (c.create_time_since_epoch, c.id))


def latest_output_uri(store, node_id: str, key: str) -> str:
    """The URI of a node's output in the newest run, e.g. SchemaGen's schema."""
    artifact = run_outputs(store, latest_run(store)).get((node_id, key))
    if artifact is None:
        raise LookupError(f"the newest run has no output '{key}' of {node_id}")
    return artifact.uri
