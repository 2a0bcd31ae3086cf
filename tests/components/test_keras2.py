"""components.keras2: a process whose environment lacks TF_USE_LEGACY_KERAS, where TFMA resolved
`tf.keras` to Keras 3 first (a Beam SDK worker from a bare pool), gets Keras 2 from our code:
importing components/ points `tf.keras` at tf_keras, and the Evaluator's model loader loads with
tf_keras by name. The night on such workers: tests/test_worker_pool_night.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.e2e  # a fresh TensorFlow process

BARE_WORKER = """
import sys
import tensorflow_model_analysis  # what a worker unpickling TFMA's stages imports first
import tensorflow as tf
print(tf.keras.__name__.split(".")[0])  # the environment's Keras: 3, package "keras"
keras_3 = tf.keras

import tf_keras
model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
model.save(sys.argv[1], save_format="tf")

import components  # what unpickling one of our functions imports
print(tf.keras.__name__.split(".")[0])
from components.keras2 import LoadWithTfKeras

tf.keras = keras_3  # the loader alone, on a worker whose tf.keras is Keras 3
loaded = LoadWithTfKeras(sys.argv[1], ["serve"])()
print(type(loaded).__module__.split(".")[0], isinstance(loaded, tf_keras.Model))
"""


def test_a_bare_worker_gets_keras_2_from_our_code_after_tfma_resolved_keras_3(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-c", BARE_WORKER, str(tmp_path / "model")], cwd=REPO,
        env={"PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.defpath}"},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    # Keras 3 first (the negative control: the environment's choice), then the project's.
    assert result.stdout.split() == ["keras", "tf_keras", "tf_keras", "True"]
