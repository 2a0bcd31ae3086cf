"""The bundled spans (data/penguins) against the reviewed schema: they do not drift, and their
figures are the ones configs/pipeline.yaml's drift comments quote."""
from __future__ import annotations

from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import schema_pb2

from components.csv_example_gen import files_in_window
from components.drift_gate import JSD, L_INF, compare_spans, enforce
from tests.helpers import example_config

CONFIG = example_config()
SCHEMA = text_format.Parse(CONFIG.schema_file.read_text(), schema_pb2.Schema())
SETTINGS = {"features": CONFIG.features.model_dump(mode="json"),
            "null_markers": CONFIG.data.null_markers, "file_pattern": CONFIG.data.file_pattern,
            "thresholds": CONFIG.drift_thresholds()}


def test_the_bundled_spans_do_not_drift():
    window = files_in_window(str(CONFIG.data.input_base), CONFIG.data.file_pattern, 10 ** 6, 2)
    result = compare_spans(window, SCHEMA, SETTINGS)
    assert (result["newest_span"], result["previous_span"]) == ("2009-12-31", "2008-12-31")
    by_feature = {f["feature"]: f for f in result["features"]}
    assert set(by_feature) == {"species", "island", "sex", "bill_length_mm", "bill_depth_mm",
                               "flipper_length_mm", "body_mass_g"}
    assert by_feature["body_mass_g"]["measure"] == JSD
    assert by_feature["island"]["measure"] == L_INF
    assert all(f["distance"] is not None and not f["drifted"] for f in result["features"])
    # configs/pipeline.yaml: "The bundled spans differ by at most 0.12 and 0.16."
    assert max(f["distance"] for f in result["features"] if f["measure"] == JSD) <= 0.12
    assert max(f["distance"] for f in result["features"] if f["measure"] == L_INF) <= 0.16
    enforce(result, "stop")  # nothing to stop


def test_the_newest_bundled_span_does_not_drift_from_the_training_window():
    window = files_in_window(str(CONFIG.data.input_base), CONFIG.data.file_pattern, 10 ** 6, 3)
    result = compare_spans(window, SCHEMA, {**SETTINGS, "span_window": 3})
    assert result["window"]["spans"] == ["2007-12-31", "2008-12-31"]
    assert not any(f["drifted"] for f in result["window"]["features"])
