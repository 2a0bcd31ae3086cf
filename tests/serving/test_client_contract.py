"""The client's requests against the pushed model, without HTTP: for the same CSV rows, both
prediction signatures must answer as for the tf.Examples the pipeline's own reader builds."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import predict
from tests.serving.sample_rows import SAMPLE_CSV, SAMPLE_ROWS

pytestmark = pytest.mark.e2e  # needs the pushed model of the session's pipeline run


def test_client_signatures_are_the_models_prediction_signatures(session_model):
    from components.trainer.export import PREDICT_SIGNATURES

    assert set(predict.SIGNATURES) == set(PREDICT_SIGNATURES)
    for name in predict.SIGNATURES:
        assert session_model.signatures[name].method_name == "tensorflow/serving/predict"


def test_client_rows_give_the_answers_of_training_examples(session_model, pushed_config, tmp_path):
    from components.example_gen.csv_reader import parse_csv

    features, nulls = pushed_config.features, pushed_config.data.null_markers
    path = tmp_path / "rows.csv"
    path.write_text(SAMPLE_CSV)
    rows = [row.values for row in predict.read_rows(path, features, nulls)]
    # The tf.Examples Transform and Trainer saw, built by the pipeline's CSV reader.
    examples = [e.SerializeToString()
                for e in parse_csv(str(path), SAMPLE_CSV, pushed_config.reader_features, nulls)]
    expected = session_model.run("serving_default", {"examples": examples})
    assert len(examples) == SAMPLE_ROWS

    for signature in predict.SIGNATURES:
        # Through JSON, as on the wire: NaN for a missing number must survive the trip.
        body = json.loads(json.dumps(predict.build_request(rows, features, signature)))
        answers = session_model.predict_instances(body["signature_name"], body["instances"])
        np.testing.assert_allclose([a["probabilities"] for a in answers],
                                   expected["probabilities"], atol=1e-6, err_msg=signature)
        assert [a["class_name"] for a in answers] == \
            [c.decode() for c in expected["class_name"]], signature
