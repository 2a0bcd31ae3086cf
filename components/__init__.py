"""Custom TFX components: the anomaly gate, the serving baseline, the CSV reader."""
import os

# TFT 1.16 works only with Keras 2 and flips this on import; fix it before any TensorFlow import so
# every process (CLI, Beam workers, Kubeflow containers) gets the same Keras.
os.environ["TF_USE_LEGACY_KERAS"] = "1"
