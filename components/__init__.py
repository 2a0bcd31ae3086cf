"""Custom TFX components, one folder each (component, executor, their keys and tests), and the
Trainer's runtime in trainer/. They import core/ and models/, never the app (pipeline/)."""
# Keras 2 before TensorFlow loads, and AutoGraph's tf_keras rule, in every process that runs a
# component: a component's container may import nothing else of ours first. A Beam worker may
# have resolved tf.keras (to Keras 3) before it unpickles one of our functions: use_keras_2.
import core  # noqa: F401
from components.autograph import skip_tf_keras
from components.keras2 import use_keras_2

use_keras_2()
skip_tf_keras()

