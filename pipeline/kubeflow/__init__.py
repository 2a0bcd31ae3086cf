"""Kubeflow Pipelines (open-source KFP v2), by where the code runs (README.md):

- `client/`: on the user's machine: compile the TFX pipeline to a PipelineSpec, adapt it to
  open-source KFP, check it, upload it, run or schedule it (`python -m pipeline.run --runner
  kubeflow`);
- `step/`: in the step image, in each step's pod: the entrypoint, the executors' wrappers, the
  Beam step, the run lease's and the exit step's parts, the step records;
- `training_job/`: the Trainer's job for multi-worker strategies (a Trainer v2 TrainJob, or a
  Training Operator TFJob).
Running a compiled spec here as the backend would is a dev tool, not shipped: devtools/kfp_backend
(with devtools/local_image for the step image).
"""


class KubeflowError(RuntimeError):
    """Why compiling or publishing stopped, in words for the user (and what it left behind)."""
