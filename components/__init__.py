"""Custom TFX components: the typed CSV reader, the anomaly gate, the serving baseline."""
# Keras 2 and AutoGraph settings that every TFX process needs (see models/__init__.py); imported
# here too because a component's container may import nothing else of ours first.
import models  # noqa: F401
