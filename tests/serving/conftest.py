"""Fixtures of the serving tests. The pushed model is loaded once, lazily: the client's unit tests
need no model and no TensorFlow."""
from __future__ import annotations

import pytest

from core.config import TF_SERVING_VERSIONS, load_config


@pytest.fixture(scope="session")
def pushed_config(pushed_run):
    return load_config(pushed_run.config_path)


@pytest.fixture(scope="session")
def session_model(pushed_run):
    from devtools.tf_serving.session_model import SessionModel

    return SessionModel(pushed_run.version_dir)


@pytest.fixture(params=TF_SERVING_VERSIONS)
def serving_stub(request, session_model, pushed_config):
    """TF Serving's REST predict endpoint on loopback, answering with the pushed model, at each
    server version the config allows, with the deploy's batching limit."""
    from pipeline.predict import BATCHING_CONFIG, max_batch_size
    from devtools.tf_serving.rest_stub import RestStub

    with RestStub(pushed_config.serving.model_name, session_model.predict_instances,
                  server_version=request.param,
                  max_batch_size=max_batch_size(BATCHING_CONFIG)) as stub:
        yield stub
