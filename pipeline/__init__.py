"""Builds and runs the TFX pipeline from one typed config."""
import os
import warnings

# TFT 1.16 works only with Keras 2 and flips this on import; fix it before any TensorFlow import so
# every process (CLI, Beam workers, Kubeflow containers) gets the same Keras.
os.environ["TF_USE_LEGACY_KERAS"] = "1"


def quiet_cli() -> None:
    """For a command-line entry point, before TensorFlow loads: no C++ start-up chatter (CUDA
    plugin registration, CPU features) and no libraries' deprecation notices; real failures
    still raise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
