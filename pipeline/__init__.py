"""The app: the CLIs, build_pipeline(config), the runners (local, Kubeflow) and the run summary."""
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
