"""The gate's message lists each anomaly by split, feature and kind."""
from tensorflow_metadata.proto.v0 import anomalies_pb2

from components.anomaly_gate import describe_anomalies


def test_each_anomaly_becomes_a_line():
    anomalies = anomalies_pb2.Anomalies()
    info = anomalies.anomaly_info["island"]
    info.reason.add(type=anomalies_pb2.AnomalyInfo.ENUM_TYPE_UNEXPECTED_STRING_VALUES,
                    description="Examples contain values missing from the schema: Atlantis.")
    anomalies.dataset_anomaly_info.reason.add(
        type=anomalies_pb2.AnomalyInfo.DATASET_LOW_NUM_EXAMPLES,
        description="Low num examples in dataset.")
    assert describe_anomalies("eval", anomalies) == [
        "split 'eval', feature 'island': ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain "
        "values missing from the schema: Atlantis.",
        "split 'eval', whole dataset: DATASET_LOW_NUM_EXAMPLES: Low num examples in dataset."]
    assert describe_anomalies("train", anomalies_pb2.Anomalies()) == []
