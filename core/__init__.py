"""The base layer: what every other part reads (the typed config, node ids, the CSV cell policy,
storage paths, fingerprints, hyper-parameter introspection, the run lock, progress logging).

It imports no TensorFlow, TFX or Beam (tests/test_layout.py), so the config check and the predict
client start fast. Importing it sets the one process-wide Keras choice.
"""
import os
import warnings

# TFT 1.16 works only with Keras 2 and flips this on import; set before any TensorFlow import so
# every process (CLI, Beam workers, Kubeflow containers) gets the same Keras. Every package of
# the template imports core first; models/ (the user's) imports nothing of the template.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
# And no C++ start-up chatter on a user's console (oneDNN, the CUDA and TensorRT probing, plugin
# registration) before our own first line; a user who wants it sets the variable.
# (pipeline/kubeflow/training_job/worker.py keeps C++ errors in a replica's log unless one was set.)
CPP_LOG_LEVEL_GIVEN = "TF_CPP_MIN_LOG_LEVEL" in os.environ
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# google-api-core warns once per Google client library (api_core, bigquery, bigquery_storage,
# pubsub: TFX imports them) that Python 3.10 will lose support; the pinned versions are fixed.
warnings.filterwarnings("ignore", category=FutureWarning,
                        module=r"google\.api_core\._python_version_support")
