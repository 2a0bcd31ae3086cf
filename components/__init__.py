"""Custom TFX components, one folder each (component, executor, their keys and tests), and the
Trainer's runtime in trainer/. They import core/ and models/, never the app (pipeline/)."""
# Keras 2 before TensorFlow loads, and AutoGraph's tf_keras rule, in every process that runs a
# component: a component's container may import nothing else of ours first.
import core  # noqa: F401
from components.autograph import skip_tf_keras

skip_tf_keras()

