"""The file systems a step's paths need, registered in its process (TensorFlow knows gs:// only;
tensorflow-io adds s3://). Kept out of core/storage.py, which imports no TensorFlow."""
from __future__ import annotations

from typing import Iterable, Optional

from core import storage


def enable(uris: Iterable[Optional[str]]) -> None:
    """Registers the file systems uris need; StorageError for one the steps can't open."""
    if any(storage.scheme(u) == "s3" for u in storage.check(uris)):
        import tensorflow_io  # noqa: F401  (registers s3:// with tf.io.gfile)
