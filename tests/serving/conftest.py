"""Fixtures of the serving tests. The pushed model is loaded once, lazily: the client's unit tests
need no model and no TensorFlow."""
from __future__ import annotations

import pytest

from core.config import load_config


@pytest.fixture(scope="session")
def pushed_config(pushed_run):
    return load_config(pushed_run.config_path)


@pytest.fixture(scope="session")
def session_model(pushed_run):
    from tests.serving.session_model import SessionModel

    return SessionModel(pushed_run.version_dir)


@pytest.fixture
def serving_stub(session_model, pushed_config):
    """TF Serving's REST predict endpoint on loopback, answering with the pushed model."""
    from tests.serving.rest_stub import RestStub

    with RestStub(pushed_config.serving.model_name, session_model.predict_instances) as stub:
        yield stub
