"""The config's `model:` section is build_model's keyword arguments (core/hyperparameters.py):
names, requiredness and types come from its signature, read without importing TensorFlow."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from core.config import ConfigError, load_config
from core.hyperparameters import check, hyperparameters, model_source
from tests.helpers import REPO, write_config

SOURCE = '''
from typing import Annotated, List
from pydantic import Field

def build_model(spec, categorical_sizes, num_classes, *,
                layers: Annotated[List[int], Field(min_length=1)],
                temperature: Annotated[float, Field(gt=0)] = 1.0,
                activation: str = "relu", note=None,
                jit_compile: bool = False, steps_per_execution: int = 1):
    pass
'''


@pytest.fixture
def model_py(tmp_path):
    path = tmp_path / "models" / "model.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(SOURCE))
    return path


def test_keyword_only_parameters_are_the_hyperparameters(model_py):
    found = hyperparameters(model_py)
    assert list(found) == ["layers", "temperature", "activation", "note"]
    assert found["layers"].required and not found["temperature"].required


def test_a_new_keyword_argument_is_a_new_config_key(model_py):
    typed, problems = check({"layers": [4, 2], "temperature": "0.5", "activation": "tanh"},
                            model_py)
    assert problems == [] and typed == {"layers": [4, 2], "temperature": 0.5,
                                        "activation": "tanh"}


@pytest.mark.parametrize("values, words", [
    ({"layers": [4], "temprature": 2}, "'temprature' is not a hyper-parameter of build_model "
                                       "(models/model.py: its keyword-only parameters are "
                                       "['activation', 'layers', 'note', 'temperature'])"),
    ({}, "'layers' is required by build_model (models/model.py) and not set"),
    ({"layers": []}, "'layers': [] does not fit build_model's annotation"),
    ({"layers": [4], "temperature": 0}, "Input should be greater than 0"),
    ({"layers": [4], "jit_compile": True}, "'jit_compile' is not a hyper-parameter"),
])
def test_what_build_model_would_refuse_is_refused_on_load(model_py, values, words):
    _, problems = check(values, model_py)
    assert any(words in p for p in problems), problems


@pytest.mark.parametrize("changes, words", [
    ({"model.hiden_units": [8]}, "model: 'hiden_units' is not a hyper-parameter"),
    ({"model.dropout": 1.5}, "model: 'dropout': 1.5 does not fit"),
    ({"model.hidden_units": [0]}, "Input should be greater than or equal to 1"),
])
def test_the_bundled_models_hyperparameters_are_checked_on_load(tmp_path, changes, words):
    with pytest.raises(ConfigError, match="pipeline.yaml") as raised:
        load_config(write_config(tmp_path, changes))
    assert words in str(raised.value)


def test_loading_a_config_does_not_import_tensorflow():
    code = ("import sys; from core.config import load_config; "
            "c = load_config('configs/pipeline.yaml'); "
            "assert c.model['hidden_units'] == [32, 16], c.model; "
            "assert 'tensorflow' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert model_source() == REPO / "models" / "model.py"
