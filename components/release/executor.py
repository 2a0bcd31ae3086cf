"""What the release step does with the Pusher's result, and its executor (TensorFlow- and
Beam-free: components/function_executor.py says why it is apart from component.py).

Under serving.release: canary, after the Pusher: the version this run pushed becomes the canary
of the serving Rollout (core/rollout.py release: the one release rule, shared with
`python -m pipeline.release`). The step releases exactly what the Pusher wrote (its
pushed_version), never "the newest folder": a folder another pipeline pushed is not this run's to
release. Nothing pushed (not blessed): nothing released. An aborted version is not released
again, and nothing is released while another canary runs; both are a status, not a failure (the
run did its part: the Rollout decides). A Kubernetes API that refuses or cannot be reached fails
the step: the model was pushed but not released, and the run says so.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from tfx.types import artifact

from components.function_executor import FunctionExecutor
from core import rollout as rollouts

# The status artifact's properties (components/run_report/reader.py reads them).
ACTION = "action"  # released | unchanged | aborted | in-progress | not-pushed
VERSION = "version"
PREVIOUS = "previous"
PHASE = "phase"
MESSAGE = "message"
ROLLOUT = "rollout"
NOT_PUSHED = "not-pushed"


class ReleaseStatus(artifact.Artifact):
    """What the release step did. On Kubeflow a step's pod imports a custom type by its schema
    title (TFX 1.16 kubeflow_v2_entrypoint_utils._retrieve_class_path), which must be
    `group.Name`: pipeline/kubeflow/step/entrypoint.py maps it back to this class (core/nodes.py
    CUSTOM_TYPES). Here, not in component.py, so that the release and run-report steps that read
    it import no @component machinery (Beam)."""
    TYPE_NAME = "release.Status"


class ReleaseFailed(RuntimeError):
    """Pushed, not released: the Kubernetes API refused or could not be reached."""


@dataclasses.dataclass(frozen=True)
class Status:
    action: str
    version: Optional[str]
    message: str
    rollout: str
    previous: Optional[str] = None
    phase: Optional[str] = None

    def properties(self) -> dict:
        return {key: value for key, value in (
            (ACTION, self.action), (VERSION, self.version), (PREVIOUS, self.previous),
            (PHASE, self.phase), (MESSAGE, self.message), (ROLLOUT, self.rollout))
            if value is not None}


def release_pushed(pushed: bool, pushed_version: Optional[str], rollout: str,
                   cluster: Optional[rollouts.Cluster] = None) -> Status:
    """Releases the version the Pusher pushed to the Rollout "namespace/name"; raises
    ReleaseFailed when the API refuses or cannot be reached."""
    if not pushed:
        return Status(NOT_PUSHED, None, "nothing pushed (the model was not blessed): nothing "
                      "released; the Rollout is untouched", rollout)
    if not pushed_version:
        raise ValueError("the Pusher pushed but recorded no pushed_version")
    version = rollouts.check_version(pushed_version)
    namespace, _, name = rollout.partition("/")
    try:
        outcome = rollouts.release(cluster or rollouts.Cluster.connect(), namespace, name,
                                   version)
    except rollouts.ReleaseError as error:
        raise ReleaseFailed(
            f"version {version} was pushed but not released to the Rollout {rollout}: {error}. "
            f"Release it by hand: python -m pipeline.release --version {version}") from None
    return Status(outcome.action, outcome.version, outcome.message, rollout, outcome.previous,
                  outcome.phase)


def release_step(pushed_model, status, rollout: str, code_fingerprint: str) -> None:
    """The Release component's function (component.py declares it): the Pusher's result
    released, the outcome in `status`'s properties. code_fingerprint only keys the cache."""
    del code_fingerprint
    result = release_pushed(
        bool(pushed_model.get_int_custom_property("pushed")),
        pushed_model.get_string_custom_property("pushed_version") or None, rollout)
    for key, value in result.properties().items():
        status.set_string_custom_property(key, value)


class Executor(FunctionExecutor):
    FUNCTION = staticmethod(release_step)
