"""The pushed version run by `saved_model_cli run`: TensorFlow's TF1 session loader, the one TF
Serving uses, on the inputs that deploy/serving/README.md tells users to send."""
from __future__ import annotations


import numpy as np
import pytest

from tests.helpers import run_cli
from tests.example.readme_examples import (
    documented_classes,
    raw_features_body,
    serving_default_features,
)

pytestmark = pytest.mark.e2e  # needs the pushed model of the session's pipeline run


def saved_model_cli_run(version_dir, signature, outdir, **inputs) -> dict:
    """Outputs of one signature, read back from the .npy files the CLI writes."""
    result = run_cli("tensorflow.python.tools.saved_model_cli", "run",
                     "--dir", str(version_dir), "--tag_set", "serve", "--signature_def", signature,
                     "--outdir", str(outdir), "--overwrite",
                     *[f"--{flag}={value}" for flag, value in inputs.items()], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return {name: np.load(outdir / f"{name}.npy", allow_pickle=True)
            for name in ("probabilities", "class_name")}


def check_outputs(outputs, expected_classes, version_dir):
    """The README's answer: its class for each row, that class the most probable (a model that
    answers one class for everything, or a class_name that disagrees with probabilities, fails)."""
    rows = len(expected_classes)
    classes = (version_dir / "assets" / "species").read_text().split()
    assert outputs["probabilities"].shape == (rows, 3)
    assert outputs["probabilities"].dtype == np.float32
    np.testing.assert_allclose(outputs["probabilities"].sum(axis=1), 1.0, atol=1e-5)
    assert [c.decode() for c in outputs["class_name"]] == expected_classes
    assert [classes[i] for i in outputs["probabilities"].argmax(axis=1)] == expected_classes


def test_raw_features_as_documented(pushed_run, tmp_path):
    instances = raw_features_body()["instances"]
    # One column per input, as TF Serving batches the README's `instances` rows.
    exprs = ";".join(f"{name}={[row[name] for row in instances]!r}" for name in instances[0])
    outputs = saved_model_cli_run(pushed_run.version_dir, "raw_features", tmp_path,
                                  input_exprs=exprs)
    expected = documented_classes()["raw_features"]
    assert len(expected) == len(instances) and len(set(expected)) > 1
    check_outputs(outputs, expected, pushed_run.version_dir)


def test_serving_default_as_documented(pushed_run, tmp_path):
    # saved_model_cli builds the tf.Example as the README's snippet does: str -> bytes_list,
    # float -> float_list.
    example = {name: [value] for name, value in serving_default_features().items()}
    outputs = saved_model_cli_run(pushed_run.version_dir, "serving_default", tmp_path,
                                  input_examples=f"examples={[example]!r}")
    check_outputs(outputs, documented_classes()["serving_default"], pushed_run.version_dir)
