"""The app: the CLIs, build_pipeline(config), the runners (local, Kubeflow) and the run summary."""
import logging
import os
import warnings

import core  # noqa: F401  (the process-wide Keras choice, before TensorFlow loads)

# The libraries whose deprecation notices a user of the template can do nothing about (the versions
# are pinned in requirements.lock): matched against the module a warning is attributed to, so a
# FutureWarning or DeprecationWarning raised by the template's own code (core, components, pipeline,
# models, service) still reaches the console.
LIBRARY_MODULES = (r"(tensorflow|tensorflow_[a-z_]+|tf_keras|keras|tfx|tfx_bsl|apache_beam|google"
                   r"|ml_metadata|absl|pyarrow|numpy|pandas|sklearn|kfp|kfp_pipeline_spec)(\.|$)")


def quiet_cli() -> None:
    """For a command-line entry point, before TensorFlow loads: no C++ start-up chatter (CUDA
    plugin registration, CPU features) and no pinned libraries' deprecation notices (ours still
    show); real failures still raise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_MODULES)
    # Library notices a user can do nothing about, by logger and message (logging, not warnings):
    # Beam's pure-Python CRC without python-snappy, and TFX's input resolution not supporting
    # property predicates (MLMD queries we never make).
    logging.getLogger("apache_beam.io.tfrecordio").addFilter(
        lambda record: "python-snappy" not in str(record.msg))
    logging.getLogger("absl").addFilter(
        lambda record: not str(record.msg).endswith(".property_predicate is not supported."))
