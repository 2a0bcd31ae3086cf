"""Every entry point runs Keras 2 (tf_keras): TFT 1.16 supports nothing else."""
import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.e2e  # runs the real entry points


def test_entry_points_get_keras_2_whatever_is_imported_first():
    # tf.keras is resolved on first access: touch it before anything of TFT's is imported.
    # Fresh interpreters: which Keras loads depends on the environment at import time, which a
    # prefork server's preloaded TensorFlow has already read (devtools/prefork.py).
    result = run_cli("pipeline.run", "--help", fresh=True)
    assert result.returncode == 0
    probe = run_cli("tests.keras_probe", fresh=True)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["tf_keras", "True"]
