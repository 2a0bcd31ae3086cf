"""TF Serving's gRPC messages and methods without tensorflow-serving-api (which imports all of
TensorFlow: 14 s and ~550 MB at start). tf_serving_protos.binpb is the FileDescriptorSet of the
official protos (tf_serving_protos.txt: their versions; devtools/tf_serving_protos.py regenerates
it); loaded into a pool of its own, with protobuf's well-known types it imports, it gives the
message classes and each method's path, serializer and deserializer."""
from __future__ import annotations

from pathlib import Path

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

SET = Path(__file__).with_name("tf_serving_protos.binpb")


def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    for well_known in (any_pb2, wrappers_pb2):
        pool.AddSerializedFile(well_known.DESCRIPTOR.serialized_pb)
    for file in descriptor_pb2.FileDescriptorSet.FromString(SET.read_bytes()).file:
        pool.AddSerializedFile(file.SerializeToString())
    return pool


POOL = _pool()


def message(full_name: str):
    """The message class of full_name (e.g. tensorflow.serving.PredictRequest)."""
    descriptor = POOL.FindMessageTypeByName(full_name)
    get = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    if get:
        return get(descriptor)
    return message_factory.MessageFactory(POOL).GetPrototype(descriptor)


def enum_value(full_name: str, name: str) -> int:
    """The number of an enum's value, e.g. enum_value("tensorflow.DataType", "DT_FLOAT")."""
    return POOL.FindEnumTypeByName(full_name).values_by_name[name].number


def unary(channel, service: str, method: str):
    """A unary-unary callable of service.method (e.g. tensorflow.serving.PredictionService,
    Predict) on a grpc channel: its path, request and answer types as the proto declares them."""
    found = POOL.FindServiceByName(service).FindMethodByName(method)
    return channel.unary_unary(f"/{service}/{found.name}",
                               request_serializer=message(found.input_type.full_name)
                               .SerializeToString,
                               response_deserializer=message(found.output_type.full_name)
                               .FromString)
