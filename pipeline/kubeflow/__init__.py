"""Kubeflow Pipelines (open-source KFP v2), one module a job:

- `compiler`: TFX pipeline -> PipelineSpec YAML, with the cluster's paths and the image;
- `spec`: the pure dict -> dict adaptation of TFX's (Vertex-minded) spec to the open-source backend;
- `preflight`: what is refused before anything is sent (a root, data or serving path the steps
  could not open, a name KFP refuses);
- `publish`: the KFP API: upload a version, start a run, replace the nightly recurring run;
- `entrypoint`: what the image runs for each step (TFX's entrypoint, input types restored, the
  outputs the backend adds set aside);
- `kubernetes_platform`: what each step's pod gets that a PipelineSpec cannot say;
- `training_job`: the Trainer's executor for multi-worker strategies (a Trainer v2 TrainJob, or a
  Training Operator TFJob);
- `cli`: `python -m pipeline.run --runner kubeflow`.
Running a compiled spec here as the backend would is a dev tool, not shipped: devtools/kfp_backend
(with devtools/local_image for the step image).
"""


class KubeflowError(RuntimeError):
    """Why compiling or publishing stopped, in words for the user (and what it left behind)."""
