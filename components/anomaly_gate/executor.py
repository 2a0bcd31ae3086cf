"""What the AnomalyGate step runs (its executor: components/function_executor.py says why it is
apart from component.py): stops the run when ExampleValidator found anomalies (it only records
them, never fails)."""

import os
from typing import List

import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.types import artifact_utils

from components.function_executor import FunctionExecutor

ANOMALIES_FILE = "SchemaDiff.pb"


class AnomaliesFoundError(RuntimeError):
    """The data does not match the schema; the message lists every anomaly."""


def describe_anomalies(split: str, anomalies: anomalies_pb2.Anomalies) -> List[str]:
    """One readable line per anomaly: split, feature, kind, and TFDV's description."""
    lines = []
    for feature, info in sorted(anomalies.anomaly_info.items()):
        for reason in info.reason or [
                anomalies_pb2.AnomalyInfo.Reason(description=info.description)]:
            kind = anomalies_pb2.AnomalyInfo.Type.Name(reason.type)
            lines.append(f"split '{split}', feature '{feature}': {kind}: {reason.description}")
    for reason in anomalies.dataset_anomaly_info.reason:
        kind = anomalies_pb2.AnomalyInfo.Type.Name(reason.type)
        lines.append(f"split '{split}', whole dataset: {kind}: {reason.description}")
    return lines


def read_anomalies(uri: str, split: str) -> anomalies_pb2.Anomalies:
    anomalies = anomalies_pb2.Anomalies()
    path = os.path.join(uri, f"Split-{split}", ANOMALIES_FILE)
    anomalies.ParseFromString(tf.io.gfile.GFile(path, "rb").read())
    return anomalies


def anomaly_gate(anomalies, schema_hint: str, code_fingerprint: str) -> None:
    """Fails the run, listing each anomaly, unless every split matches the schema.
    code_fingerprint: this package's code, so that editing it re-runs the gate (cache key)."""
    del code_fingerprint
    problems = []
    for split in artifact_utils.decode_split_names(anomalies.split_names):
        problems += describe_anomalies(split, read_anomalies(anomalies.uri, split))
    if problems:
        raise AnomaliesFoundError(
            f"the data does not match the schema ({len(problems)} "
            f"anomal{'y' if len(problems) == 1 else 'ies'}); fix the data, or "
            f"if the change is intended, update the schema ({schema_hint}):\n  "
            + "\n  ".join(problems))


class Executor(FunctionExecutor):
    FUNCTION = staticmethod(anomaly_gate)
