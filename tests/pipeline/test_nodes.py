"""core/nodes.py names every step and every output read back: the built pipeline has exactly
those ids, and each named output exists on its step under TFX's own key."""
from __future__ import annotations


from core import nodes
from core.config import load_config
from tests.helpers import write_config

OUTPUTS = [value for name, value in vars(nodes).items()
           if name.isupper() and isinstance(value, tuple)]
IDS = {value for name, value in vars(nodes).items() if name.isupper() and isinstance(value, str)}


def _steps(tmp_path, changes=None, run_report=True):
    from pipeline.builder import build_components

    config = load_config(write_config(tmp_path, changes))
    return {step.id: step for step in build_components(config, run_report=run_report)}


def test_every_step_has_a_named_id_and_every_named_id_is_a_step(tmp_path):
    reviewed = _steps(tmp_path / "reviewed")
    inferred = _steps(tmp_path / "inferred", {"schema_file": None})
    canary = _steps(tmp_path / "canary", {"serving.release": "canary"})
    # RunExit is no TFX component: the compiler adds it after the built pipeline's steps
    # (pipeline/kubeflow/client/exit_handler.py; tests/kubeflow/test_spec.py reads it there).
    assert set(reviewed) | set(inferred) | set(canary) == IDS - {nodes.RUN_EXIT}
    # The release step only under serving.release: canary, right after the Pusher.
    assert nodes.RELEASE not in reviewed and nodes.RELEASE not in inferred
    assert list(canary)[list(canary).index(nodes.PUSHER) + 1] == nodes.RELEASE
    # Exactly one schema step, by config.
    assert nodes.IMPORT_SCHEMA_GEN in reviewed and nodes.SCHEMA_GEN not in reviewed
    assert nodes.SCHEMA_GEN in inferred and nodes.IMPORT_SCHEMA_GEN not in inferred
    assert nodes.RUN_REPORT not in _steps(tmp_path / "local", run_report=False)


def test_every_named_output_is_an_output_of_its_step(tmp_path):
    steps = {**_steps(tmp_path / "reviewed"), **_steps(tmp_path / "inferred",
                                                       {"schema_file": None}),
             **_steps(tmp_path / "canary", {"serving.release": "canary"})}
    assert len(OUTPUTS) >= 12
    for node_id, key in OUTPUTS:
        assert key in steps[node_id].outputs, (node_id, key, sorted(steps[node_id].outputs))


def test_the_standard_outputs_use_tfx_keys():
    from tfx.types import standard_component_specs as tfx_keys

    assert nodes.EXAMPLES[1] == tfx_keys.EXAMPLES_KEY
    assert nodes.STATISTICS[1] == tfx_keys.STATISTICS_KEY
    assert nodes.INFERRED_SCHEMA[1] == tfx_keys.SCHEMA_KEY
    assert nodes.ANOMALIES[1] == tfx_keys.ANOMALIES_KEY
    assert nodes.TRANSFORM_GRAPH[1] == tfx_keys.TRANSFORM_GRAPH_KEY
    assert (nodes.MODEL[1], nodes.MODEL_RUN[1]) == (tfx_keys.MODEL_KEY, tfx_keys.MODEL_RUN_KEY)
    assert nodes.EVALUATION[1] == tfx_keys.EVALUATION_KEY
    assert nodes.BLESSING[1] == tfx_keys.BLESSING_KEY
    assert nodes.PUSHED_MODEL[1] == tfx_keys.PUSHED_MODEL_KEY
