"""The bundled spans (data/penguins) against the reviewed schema: they do not drift, and their
figures are the ones configs/pipeline.yaml's drift comments quote."""
from __future__ import annotations

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from tests.helpers import example_config


def gate():
    """Imported when a test runs, not at collection (tests/README.md)."""
    import components.drift_gate.component

    return components.drift_gate.component


def reader():
    """Imported when a test runs, not at collection (tests/README.md)."""
    import components.example_gen.csv_reader

    return components.example_gen.csv_reader


CONFIG = example_config()
SCHEMA = text_format.Parse(CONFIG.schema_file.read_text(), schema_pb2.Schema())
READER, THRESHOLDS = CONFIG.reader_settings, CONFIG.drift_thresholds()


def test_the_bundled_spans_do_not_drift():
    window = reader().files_in_window(str(CONFIG.data.input_base), CONFIG.data.file_pattern,
                                   10 ** 6, 2)
    result = gate().compare_spans(window, SCHEMA, READER, THRESHOLDS)
    assert (result["newest_span"], result["previous_span"]) == ("2009-12-31", "2008-12-31")
    by_feature = {f["feature"]: f for f in result["features"]}
    assert set(by_feature) == {"species", "island", "sex", "bill_length_mm", "bill_depth_mm",
                               "flipper_length_mm", "body_mass_g"}
    assert by_feature["body_mass_g"]["measure"] == gate().JSD
    assert by_feature["island"]["measure"] == gate().L_INF
    assert all(f["distance"] is not None and not f["drifted"] for f in result["features"])
    # configs/pipeline.yaml: "The bundled spans differ by at most 0.12 and 0.16."
    assert max(f["distance"] for f in result["features"] if f["measure"] == gate().JSD) <= 0.12
    assert max(f["distance"] for f in result["features"] if f["measure"] == gate().L_INF) <= 0.16
    gate().enforce(result, "stop")  # nothing to stop


def test_the_newest_bundled_span_does_not_drift_from_the_training_window():
    window = reader().files_in_window(str(CONFIG.data.input_base), CONFIG.data.file_pattern,
                                   10 ** 6, 3)
    result = gate().compare_spans(window, SCHEMA, READER.model_copy(update={"span_window": 3}),
                                  THRESHOLDS)
    assert result["window"]["spans"] == ["2007-12-31", "2008-12-31"]
    assert not any(f["drifted"] for f in result["window"]["features"])
