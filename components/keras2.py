"""Keras 2 (tf_keras) in a process that our code did not start: a Beam SDK worker.

core/__init__.py sets TF_USE_LEGACY_KERAS before TensorFlow resolves `tf.keras`, in every process
that starts from our code. A Beam worker starts from Beam's (worker_pool_main runs `python -c
"...SdkHarness(...).run()"` with the pool's environment) and imports what each stage's pickled
functions name, in the stage's order. Importing TFMA resolves `tf.keras` (its utils/keras_lib.py
reads `tf.keras.version`), so a worker whose environment lacks the variable gets Keras 3 there
for good when a TFMA function is unpickled before ours, and TFMA's model loader, which calls
`tf.keras.models.load_model` (utils/model_util.py model_construct_fn), then refuses our
SavedModel. Two remedies, both the project's rather than the worker environment's:
`use_keras_2()` points an already resolved `tf.keras` at tf_keras (components/__init__.py calls
it, so any stage that unpickles one of our functions gets it), and `LoadWithTfKeras` is the
Evaluator's model loader, naming tf_keras itself (components/evaluator/component.py).
"""
from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import List, Optional

# What TensorFlow 2.16's lazy loader loads for `tf.keras` under TF_USE_LEGACY_KERAS
# (tensorflow/python/util/lazy_loader.py KerasLazyLoader._initialize, mode v2).
TF_KERAS_API = "tf_keras.api._v2.keras"


def resolved_keras(tf_module) -> Optional[str]:
    """The package `tf.keras` already resolved to in this process (e.g. "keras" for Keras 3's
    keras._tf_keras.keras), or None while it is unresolved: read without resolving it."""
    current = vars(tf_module).get("keras")
    if current is None or "_tfll_initialized" in vars(current):
        if current is None or not vars(current)["_tfll_initialized"]:
            return None
        return vars(current).get("_tfll_keras_version")
    return vars(current).get("__name__", "").split(".")[0]


def use_keras_2() -> bool:
    """Keras 2 for every later `tf.keras` of this process; True when `tf.keras` had already
    resolved to another Keras and now names tf_keras."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    tf_module = sys.modules.get("tensorflow")
    if tf_module is None:
        return False
    resolved = resolved_keras(tf_module)
    if resolved in (None, "tf_keras"):
        return False
    logging.info("tf.keras had resolved to %s in this process (its environment lacks "
                 "TF_USE_LEGACY_KERAS=1): pointing it at tf_keras", resolved)
    tf_module.keras = importlib.import_module(TF_KERAS_API)
    return True


class LoadWithTfKeras:
    """TFMA's model construct_fn for a Keras model (utils/model_util.py model_construct_fn,
    TF_KERAS branch), loading with tf_keras by name: what the worker's `tf.keras` is does not
    matter. Pickled by reference, so a worker imports components/ (use_keras_2) to unpickle it."""

    def __init__(self, model_path: str, tags: Optional[List[str]]):
        self.model_path = model_path
        self.tags = list(tags or [])

    def __call__(self):
        import tensorflow as tf
        import tf_keras

        use_keras_2()
        if tf.saved_model.TPU in self.tags:  # as TFMA's construct_fn
            tf.tpu.experimental.initialize_tpu_system()
        return tf_keras.models.load_model(self.model_path)


def with_tf_keras_loader(eval_shared_model):
    """TFMA's EvalSharedModel (api/types.py), loading a Keras model with LoadWithTfKeras; any
    other model type as TFMA loads it."""
    from tensorflow_model_analysis import constants, types

    if eval_shared_model.model_type != constants.TF_KERAS:
        return eval_shared_model
    tags = eval_shared_model.model_loader.tags
    return eval_shared_model._replace(model_loader=types.ModelLoader(
        construct_fn=LoadWithTfKeras(eval_shared_model.model_path, tags), tags=tags))
