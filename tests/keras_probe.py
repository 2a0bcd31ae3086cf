"""Prints which Keras the project's code gets when TensorFlow is imported right after it."""
import pipeline  # noqa: F401  (the entry points' first import)
import tensorflow as tf

import models.model

# tf.keras is resolved lazily; under Keras 3 it would be the `keras` 3.x package.
print(tf.keras.__name__.split(".")[0], tf.keras.Model is models.model.keras.Model)
