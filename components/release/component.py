"""Release: after the Pusher, the pushed version becomes the canary of the serving Rollout.

In the pipeline only under serving.release: canary (pipeline/builder.py); with direct there is no
such step and TF Serving loads the pushed version itself. The spec (inputs, output, parameters) is
the decorated function's signature, the executor executor.py's release_pushed. Its output
`status` records what happened (executor.py's properties: action, version, message, ...); the run
report shows it (components/run_report/reader.py).
"""
from tfx.dsl.component.experimental.annotations import (InputArtifact, OutputArtifact,
                                                        Parameter)
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact, standard_artifacts

from components.release import executor


class ReleaseStatus(artifact.Artifact):
    """What the release step did. On Kubeflow a step's pod imports a custom type by its schema
    title (TFX 1.16 kubeflow_v2_entrypoint_utils._retrieve_class_path), which must be
    `group.Name`: pipeline/kubeflow/entrypoint.py maps it back to this class (core/nodes.py
    CUSTOM_TYPES)."""
    TYPE_NAME = "release.Status"


@component
def Release(  # noqa: N802 (a TFX component is named like a class)
        pushed_model: InputArtifact[standard_artifacts.PushedModel],
        status: OutputArtifact[ReleaseStatus],
        rollout: Parameter[str],
        code_fingerprint: Parameter[str]) -> None:
    """rollout: "namespace/name" of the serving Rollout; code_fingerprint: this step's code and
    the Rollout client's (core/rollout.py), so that editing them re-runs it (cache key). An
    unchanged re-run is served from the cache and releases nothing again."""
    del code_fingerprint
    result = executor.release_pushed(
        bool(pushed_model.get_int_custom_property("pushed")),
        pushed_model.get_string_custom_property("pushed_version") or None, rollout)
    for key, value in result.properties().items():
        status.set_string_custom_property(key, value)
