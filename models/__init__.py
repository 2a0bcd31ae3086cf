"""The model: features, preprocessing, the tf_keras network, its serving signatures."""
import os

# TFT 1.16 works only with Keras 2 and flips this on import; fix it before any TensorFlow import so
# every process (CLI, Beam workers, Kubeflow containers) gets the same Keras.
os.environ["TF_USE_LEGACY_KERAS"] = "1"

from tensorflow.python.autograph.core import config as _autograph_config  # noqa: E402

# AutoGraph skips `keras` but not `tf_keras`, so TF 2.16 re-transpiles Keras 2's internals each
# time a model function is traced: ~10 s per first `fit` on a tiny model, ~0.5 s with this rule.
# TFMA's Keras metrics
# pay the same price in the Evaluator.
if not any(getattr(rule, "_prefix", None) == "tf_keras"
           for rule in _autograph_config.CONVERSION_RULES):
    _autograph_config.CONVERSION_RULES = (
        _autograph_config.DoNotConvert("tf_keras"), *_autograph_config.CONVERSION_RULES)
