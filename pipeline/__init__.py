"""The app: the CLIs, build_pipeline(config), the runners (local, Kubeflow) and the run summary."""
import logging
import os
import warnings

import core  # noqa: F401  (the process-wide Keras choice, before TensorFlow loads)


def quiet_cli() -> None:
    """For a command-line entry point, before TensorFlow loads: no C++ start-up chatter (CUDA
    plugin registration, CPU features) and no libraries' deprecation notices; real failures
    still raise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    # Library notices a user can do nothing about, by logger and message (logging, not warnings):
    # Beam's pure-Python CRC without python-snappy, and TFX's input resolution not supporting
    # property predicates (MLMD queries we never make).
    logging.getLogger("apache_beam.io.tfrecordio").addFilter(
        lambda record: "python-snappy" not in str(record.msg))
    logging.getLogger("absl").addFilter(
        lambda record: not str(record.msg).endswith(".property_predicate is not supported."))
