"""Regenerates the endpoint's copy of TF Serving's gRPC protos from the official generated modules
(tensorflow-serving-api, which imports TensorFlow; the service image has neither):

    .venv/bin/python -m devtools.tf_serving_protos

writes service/endpoint/tf_serving_protos.binpb, one FileDescriptorSet of prediction_service.proto
and model_service.proto with every file they import (dependencies first), less protobuf's
well-known types (google/protobuf/*: the endpoint takes them from protobuf itself), and
tf_serving_protos.txt beside it, naming the versions the set came from. Each file is the
FileDescriptorProto the generated module embeds, byte for byte. tests/service/test_endpoint_grpc.py
holds the committed pair equal to what the installed modules give.
"""
from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import List

ENDPOINT = Path(__file__).resolve().parents[1] / "service" / "endpoint"
SET, SOURCE = ENDPOINT / "tf_serving_protos.binpb", ENDPOINT / "tf_serving_protos.txt"
WELL_KNOWN = "google/protobuf/"


def descriptor_set() -> bytes:
    """The FileDescriptorSet, serialized deterministically."""
    from google.protobuf import descriptor_pb2
    from tensorflow_serving.apis import model_service_pb2, prediction_service_pb2

    files: List = []

    def add(file) -> None:
        if file.name.startswith(WELL_KNOWN) or file.name in {f.name for f in files}:
            return
        for dependency in file.dependencies:
            add(dependency)
        files.append(file)

    for module in (prediction_service_pb2, model_service_pb2):
        add(module.DESCRIPTOR)
    protos = descriptor_pb2.FileDescriptorSet()
    for file in files:
        protos.file.add().MergeFromString(file.serialized_pb)
    return protos.SerializeToString(deterministic=True)


def source() -> str:
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}"
                         for name in ("tensorflow-serving-api", "tensorflow"))
    return (f"{SET.name}: TF Serving's gRPC protos (prediction_service.proto, "
            f"model_service.proto and their imports) from {versions}.\n"
            "Regenerate: .venv/bin/python -m devtools.tf_serving_protos\n")


def main() -> None:
    SET.write_bytes(descriptor_set())
    SOURCE.write_text(source())
    print(f"wrote {SET} ({SET.stat().st_size} bytes) and {SOURCE}")


if __name__ == "__main__":
    main()
