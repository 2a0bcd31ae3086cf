"""On Kubeflow, the multi-worker strategies compile to a Trainer step that runs a TrainJob or,
on the legacy operator, a TFJob."""
from __future__ import annotations

import pytest

from core.config import load_config
from pipeline.kubeflow.client.compiler import compile_spec
from tests.helpers import write_config


@pytest.mark.parametrize("strategy, operator, tfjob", [
    ("one_device", "trainjob", False), ("multi_worker_mirrored", "trainjob", True),
    ("multi_worker_mirrored", "tfjob", True), ("parameter_server", "tfjob", True)])
def test_trainer_executor_follows_the_strategy(tmp_path, strategy, operator, tfjob):
    config = load_config(write_config(tmp_path, {"training.distribution_strategy": strategy,
                                                 "training.operator": operator}))
    spec = compile_spec(config).read_text()
    assert ("pipeline.kubeflow.training_job.executor.TrainingJobExecutor" in spec) is tfjob
    assert ("tfx.components.trainer.executor.GenericExecutor" in spec) is not tfjob
    # What the executor reads at run time travels in the Trainer's custom_config.
    assert ("tfjob_pod" in spec) is tfjob and "max_restarts" in spec
    # The executor picks the job's kind at run time from the custom_config's training section.
    assert f'"operator": "{operator}"' in spec
