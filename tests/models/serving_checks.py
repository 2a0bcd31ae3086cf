"""The serving checks every exported model must pass, whatever strategy or precision trained it:
loaded as TF Serving loads it (the TF1 loader, in a session), same signatures as the
single-device model, float32 probabilities, warmup requests present."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np


SIGNATURES = ("serving_default", "raw_features", "transform_features")


def eval_examples(files: List[str]) -> List[bytes]:
    import tensorflow as tf

    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [record.numpy() for record in dataset]


def _signature_shapes(model_dir: Path) -> dict:
    import tensorflow as tf

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(model_dir))
        return {name: ({k: v.dtype for k, v in sig.inputs.items()},
                       {k: v.dtype for k, v in sig.outputs.items()})
                for name, sig in meta.signature_def.items() if name in SIGNATURES}


def check_serving_model(model_dir: Path, reference_dir: Path, examples: List[bytes]
                        ) -> np.ndarray:
    """Asserts the checks; returns serving_default's probabilities on `examples`."""
    import tensorflow as tf
    from components.trainer.export import WARMUP_FILE

    assert (model_dir / "saved_model.pb").is_file(), f"no SavedModel in {model_dir}"
    assert (model_dir / WARMUP_FILE).is_file(), "no TF Serving warmup requests"
    signatures = _signature_shapes(model_dir)
    assert set(signatures) == set(SIGNATURES), sorted(signatures)
    assert signatures == _signature_shapes(reference_dir), "signatures differ from the " \
        "single-device model's"
    assert signatures["serving_default"][1]["probabilities"] == tf.float32.as_datatype_enum
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(model_dir))
        sig = meta.signature_def["serving_default"]
        outputs = session.run({k: v.name for k, v in sig.outputs.items()},
                              {sig.inputs["examples"].name: np.array(examples, dtype=object)})
    probabilities = outputs["probabilities"]
    assert probabilities.dtype == np.float32
    assert probabilities.shape[0] == len(examples)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-3)
    return probabilities
