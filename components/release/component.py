"""Release: after the Pusher, the pushed version becomes the canary of the serving Rollout.

In the pipeline only under serving.release: canary (pipeline/builder.py); with direct there is no
such step and TF Serving loads the pushed version itself. The spec (inputs, output, parameters) is
the decorated function's signature; the step runs executor.py's Executor (release_step). Its
output `status` records what happened (executor.py's properties: action, version, message, ...);
the run report shows it (components/run_report/reader.py).
"""
from tfx.dsl.component.experimental.annotations import (InputArtifact, OutputArtifact,
                                                        Parameter)
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from components.release.executor import (  # noqa: F401  (where callers find them)
    Executor, ReleaseStatus, release_step)


@component
def Release(  # noqa: N802 (a TFX component is named like a class)
        pushed_model: InputArtifact[standard_artifacts.PushedModel],
        status: OutputArtifact[ReleaseStatus],
        rollout: Parameter[str],
        code_fingerprint: Parameter[str]) -> None:
    """rollout: "namespace/name" of the serving Rollout; code_fingerprint: this step's code and
    the Rollout client's (core/rollout.py), so that editing them re-runs it (cache key). An
    unchanged re-run is served from the cache and releases nothing again."""
    release_step(pushed_model, status, rollout, code_fingerprint)


Release.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
