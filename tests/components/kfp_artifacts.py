"""Artifacts as a Kubeflow step receives them, made the way KFP's backend and TFX make them.

A producing step's TFX artifact becomes the step's ExecutorOutput metadata (TFX 1.16
kubeflow_v2_entrypoint_utils.translate_executor_output -> to_runtime_artifact); the launcher
records that metadata in KFP's store (kubeflow/pipelines backend/src/v2/metadata/client.go
RecordArtifact -> converter.go toMLMDArtifact -> StructValueToMLMDValue, 2.17.0; 2.3.0 the same);
the next step's driver reads it back (converter.go toRuntimeArtifact) into that step's
ExecutorInput; and TFX parses it there (kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict, as
kubeflow_v2_run_executor._run_executor does). The first and last steps are TFX's own code; the
two in the middle are written out below from the Go source.
"""
from __future__ import annotations

import json
from typing import Dict, List


def kfp_store_values(metadata: dict, output_key: str) -> Dict[str, object]:
    """client.go RecordArtifact: an output's metadata as KFP's store records it, as MLMD Values
    (converter.go StructValueToMLMDValue: a string stays a string, any number becomes a double,
    a bool an int, a list or dict a struct wrapped in {"list": ...} / {"struct": ...}), with the
    display_name and store_session_info it adds when they are missing."""
    from google.protobuf import struct_pb2
    from ml_metadata.proto import metadata_store_pb2

    values = {}
    for key, value in metadata.items():
        mlmd = metadata_store_pb2.Value()
        if isinstance(value, bool):
            mlmd.int_value = int(value)
        elif isinstance(value, (int, float)):
            mlmd.double_value = float(value)
        elif isinstance(value, str):
            mlmd.string_value = value
        else:
            wrapped = struct_pb2.Struct()
            wrapped.update({"list" if isinstance(value, list) else "struct": value})
            mlmd.struct_value.CopyFrom(wrapped)
        values[key] = mlmd
    values.setdefault("display_name", metadata_store_pb2.Value(string_value=output_key))
    values.setdefault("store_session_info", metadata_store_pb2.Value(
        string_value=json.dumps({"Provider": "s3", "Params": {"fromEnv": "true"}})))
    return values


def driver_metadata(values: Dict[str, object]) -> dict:
    """converter.go toRuntimeArtifact: KFP's store values as the next step's artifact metadata
    (string -> string, double and int -> number, struct -> struct)."""
    from google.protobuf import json_format

    found = {}
    for key, value in values.items():
        kind = value.WhichOneof("value")
        if kind == "string_value":
            found[key] = value.string_value
        elif kind in ("double_value", "int_value"):
            found[key] = float(getattr(value, kind))
        elif kind == "struct_value":
            found[key] = json_format.MessageToDict(value.struct_value)
        else:
            raise AssertionError(f"toRuntimeArtifact: unknown property type {kind}")
    return found


def executor_metadata(artifact) -> dict:
    """The metadata TFX writes for an output artifact in the step's ExecutorOutput."""
    from google.protobuf import json_format
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    return json_format.MessageToDict(utils.to_runtime_artifact(artifact, {}).metadata)


def runtime_artifact(artifact, output_key: str, mlmd_id: int) -> dict:
    """A producer's output as a later step's ExecutorInput lists it (name: the MLMD id)."""
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    title = {v: k for k, v in compiler_utils.TITLE_TO_CLASS_PATH.items()}[
        f"{type(artifact).__module__}.{type(artifact).__name__}"]
    return {"name": str(mlmd_id), "uri": artifact.uri,
            "type": {"schemaTitle": title, "schemaVersion": "0.0.1"},
            "metadata": driver_metadata(kfp_store_values(executor_metadata(artifact),
                                                         output_key))}


def parse_in_step(listed: Dict[str, List[dict]]) -> dict:
    """{key: [RuntimeArtifact JSON]} -> {key: [TFX artifact]}, as TFX parses a step's input."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    executor_input = json_format.ParseDict(
        {"inputs": {"artifacts": {k: {"artifacts": v} for k, v in listed.items()}}},
        pipeline_spec_pb2.ExecutorInput())
    return utils.parse_raw_artifact_dict(executor_input.inputs.artifacts, {})
