"""AutoGraph told not to convert tf_keras, as it already skips keras.

AutoGraph skips `keras` but not `tf_keras`, so TF 2.16 re-transpiles Keras 2's internals each time
a model function is traced: ~10 s per first `fit` on a tiny model, ~0.5 s with this rule. TFMA's
Keras metrics pay the same price in the Evaluator.

The rule list is private (tensorflow/python/autograph/core/config.py `CONVERSION_RULES`), so the
rule is added only on the TensorFlow version it was read against; on another one the step runs
without it (slower, same results) and says so in the log.
"""
from __future__ import annotations

import logging

import tensorflow as tf

# The TensorFlow minor versions whose autograph/core/config.py was read for this.
READ_AGAINST = ("2.16",)


def skip_tf_keras() -> bool:
    """Adds the rule once; False (and a log line) where this TensorFlow was not read for it."""
    if ".".join(tf.__version__.split(".")[:2]) not in READ_AGAINST:
        logging.warning("TensorFlow %s: AutoGraph still converts tf_keras (the rule was read "
                        "against %s only); training and evaluation run slower, not differently",
                        tf.__version__, ", ".join(READ_AGAINST))
        return False
    from tensorflow.python.autograph.core import config

    if not any(getattr(rule, "_prefix", None) == "tf_keras" for rule in config.CONVERSION_RULES):
        config.CONVERSION_RULES = (config.DoNotConvert("tf_keras"), *config.CONVERSION_RULES)
    return True
