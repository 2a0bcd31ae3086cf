"""The pushed warmup records, replayed as TF Serving replays them at load: a record that fails would
make the whole version fail to load."""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.e2e  # needs the pushed model of the session's pipeline run

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"
MAX_RECORDS = 1000  # TF Serving reads at most this many


def warmup_logs(version_dir):
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = version_dir / WARMUP_FILE
    assert path.is_file(), f"no warmup records in {version_dir}"
    return [prediction_log_pb2.PredictionLog.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(str(path))]


def test_every_warmup_request_runs_and_gives_probabilities(pushed_run, pushed_config,
                                                           session_model):
    import tensorflow as tf

    logs = warmup_logs(pushed_run.version_dir)
    assert 1 <= len(logs) <= MAX_RECORDS
    for log in logs:
        assert log.WhichOneof("log_type") == "predict_log"
        request = log.predict_log.request
        assert request.model_spec.name == pushed_config.serving.model_name
        signature = request.model_spec.signature_name or "serving_default"
        assert signature in session_model.signatures
        batch = tf.make_ndarray(next(iter(request.inputs.values()))).shape[0]
        outputs = session_model.run_request(request)
        probabilities = outputs["probabilities"]
        assert probabilities.shape == (batch, 3)
        assert np.all(np.isfinite(probabilities)) and np.all(probabilities >= 0)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
        assert outputs["class_name"].shape == (batch,)


def test_warmup_covers_single_row_and_batched_requests(pushed_run):
    import tensorflow as tf

    sizes = {tf.make_ndarray(next(iter(log.predict_log.request.inputs.values()))).shape[0]
             for log in warmup_logs(pushed_run.version_dir)}
    assert 1 in sizes and max(sizes) > 1
