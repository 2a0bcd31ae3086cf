"""Resolves the model TF Serving serves now, as the Evaluator's baseline.

TFX's latest-blessed-model Resolver compiles, under Kubeflow V2, to Vertex-only queries that
open-source KFP rejects; this component runs the same everywhere. The baseline is what actually
serves, not what MLMD remembers: a rollback or a push from another pipeline counts. It copies that
version into its own artifact, so an evaluation stays reproducible after TF Serving's folder has
moved on.

What serves depends on serving.release:
- direct: TF Serving serves the newest complete version under the model base path (latest).
- canary: the Argo Rollout's stable version (core/rollout.py stable_version: the promoted pod
  template's version, else the stable annotation the last release left), read from the Kubernetes
  API (rollout: "namespace/name"; Cluster.connect: the pod's service account, else the kube
  config). The newest folder may be a canary still under analysis or one the Rollout aborted:
  neither is ever the baseline. No stable version yet (nothing promoted): no baseline. A stable
  version whose folder is gone, or no cluster to ask, fails the step: guessing could compare the
  candidate with an aborted model.
"""

from tfx.dsl.component.experimental.annotations import (InputArtifact, OutputArtifact,
                                                        Parameter)
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from components.serving_baseline.executor import (  # noqa: F401  (where callers find them)
    HAS_BASELINE, SERVING_VERSION, BaselineError, Executor, baseline_version, complete, copy_tree,
    latest_version, serving_baseline, stable_version)


@component
def ServingBaseline(  # noqa: N802
        candidate: InputArtifact[standard_artifacts.Model],
        baseline: OutputArtifact[standard_artifacts.Model],
        model_base_path: Parameter[str],
        code_fingerprint: Parameter[str],
        rollout: Parameter[str] = "") -> None:
    """`candidate` is taken only so that a new model re-resolves the baseline, code_fingerprint
    so that editing this step's code (or the Evaluator executor's) re-runs it (cache keys).
    rollout: "namespace/name" of the serving Rollout under serving.release: canary; not set
    (direct), the step and its cache key are as before canary releases existed."""
    serving_baseline(candidate, baseline, model_base_path, code_fingerprint, rollout)


# The step runs this: the same call without TFX's @component machinery (Beam).
ServingBaseline.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
