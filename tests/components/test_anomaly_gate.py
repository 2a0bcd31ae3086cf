"""The gate's message lists each anomaly by split, feature and kind."""
from tensorflow_metadata.proto.v0 import anomalies_pb2


def test_each_anomaly_becomes_a_line():
    from components.anomaly_gate.component import describe_anomalies

    anomalies = anomalies_pb2.Anomalies()
    info = anomalies.anomaly_info["site"]
    info.reason.add(type=anomalies_pb2.AnomalyInfo.ENUM_TYPE_UNEXPECTED_STRING_VALUES,
                    description="Examples contain values missing from the schema: elsewhere.")
    anomalies.dataset_anomaly_info.reason.add(
        type=anomalies_pb2.AnomalyInfo.DATASET_LOW_NUM_EXAMPLES,
        description="Low num examples in dataset.")
    assert describe_anomalies("eval", anomalies) == [
        "split 'eval', feature 'site': ENUM_TYPE_UNEXPECTED_STRING_VALUES: Examples contain "
        "values missing from the schema: elsewhere.",
        "split 'eval', whole dataset: DATASET_LOW_NUM_EXAMPLES: Low num examples in dataset."]
    assert describe_anomalies("train", anomalies_pb2.Anomalies()) == []


def _anomalies_artifact(folder, per_split):
    """An ExampleAnomalies artifact as ExampleValidator writes it: Split-<name>/SchemaDiff.pb."""
    from tfx.types import artifact_utils, standard_artifacts

    from components.anomaly_gate.component import ANOMALIES_FILE

    artifact = standard_artifacts.ExampleAnomalies()
    artifact.uri = str(folder)
    artifact.split_names = artifact_utils.encode_split_names(sorted(per_split))
    for split, anomalies in per_split.items():
        (folder / f"Split-{split}").mkdir(parents=True)
        (folder / f"Split-{split}" / ANOMALIES_FILE).write_bytes(anomalies.SerializeToString())
    return artifact


PROPERTIES = {"schema_hint": "configs/schema.pbtxt", "code_fingerprint": "x"}


def test_the_gate_stops_the_run_on_any_anomaly_and_lets_clean_data_through(tmp_path):
    """The component as TFX runs it (its executor's Do): an anomaly in any split raises, naming
    each one and the schema to update; clean splits pass."""
    import pytest

    from components.anomaly_gate.component import AnomaliesFoundError, AnomalyGate

    gate = AnomalyGate.EXECUTOR_SPEC.executor_class()
    bad = anomalies_pb2.Anomalies()
    bad.anomaly_info["site"].reason.add(
        type=anomalies_pb2.AnomalyInfo.ENUM_TYPE_UNEXPECTED_STRING_VALUES,
        description="Examples contain values missing from the schema: elsewhere.")
    anomalous = _anomalies_artifact(tmp_path / "bad", {"train": anomalies_pb2.Anomalies(),
                                                       "eval": bad})
    with pytest.raises(AnomaliesFoundError) as raised:
        gate.Do({"anomalies": [anomalous]}, {}, PROPERTIES)
    message = str(raised.value)
    assert "(1 anomaly)" in message and "update the schema (configs/schema.pbtxt)" in message
    assert "split 'eval', feature 'site': ENUM_TYPE_UNEXPECTED_STRING_VALUES" in message

    clean = _anomalies_artifact(tmp_path / "clean", {"train": anomalies_pb2.Anomalies(),
                                                     "eval": anomalies_pb2.Anomalies()})
    gate.Do({"anomalies": [clean]}, {}, PROPERTIES)
