"""Resolves the model TF Serving serves now, as the Evaluator's baseline.

TFX's latest-blessed-model Resolver compiles, under Kubeflow V2, to Vertex-only queries that
open-source KFP rejects; this component runs the same everywhere. The baseline is what actually
serves (the newest version under the model base path), not what MLMD remembers: a rollback or a
push from another pipeline counts. It copies that version into its own artifact, so an evaluation
stays reproducible after TF Serving's folder has moved on.
"""

import os
from typing import Optional

import tensorflow as tf
from tfx.dsl.component.experimental.annotations import (InputArtifact, OutputArtifact,
                                                        Parameter)
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

# Read by components.evaluator.component to drop an empty baseline.
HAS_BASELINE = "has_baseline"
SERVING_VERSION = "serving_version"


def latest_version(model_base_path: str) -> Optional[str]:
    """The version TF Serving's default policy (latest) serves: the highest complete number."""
    if not tf.io.gfile.isdir(model_base_path):
        return None
    versions = [int(v.rstrip("/")) for v in tf.io.gfile.listdir(model_base_path)
                if v.rstrip("/").isdigit()
                and tf.io.gfile.exists(os.path.join(model_base_path, v, "saved_model.pb"))]
    return str(max(versions)) if versions else None


def copy_tree(source: str, destination: str) -> None:
    for directory, _, files in tf.io.gfile.walk(source):
        target = os.path.join(destination, os.path.relpath(directory, source))
        tf.io.gfile.makedirs(target)
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target, name),
                             overwrite=True)


@component
def ServingBaseline(  # noqa: N802
        candidate: InputArtifact[standard_artifacts.Model],
        baseline: OutputArtifact[standard_artifacts.Model],
        model_base_path: Parameter[str],
        code_fingerprint: Parameter[str]) -> None:
    """`candidate` is taken only so that a new model re-resolves the baseline, code_fingerprint
    so that editing this step's code (or the Evaluator executor's) re-runs it (cache keys)."""
    del candidate, code_fingerprint
    version = latest_version(model_base_path)
    baseline.set_int_custom_property(HAS_BASELINE, int(version is not None))
    if version is not None:
        copy_tree(os.path.join(model_base_path, version),
                  os.path.join(baseline.uri, "Format-Serving"))
        baseline.set_string_custom_property(SERVING_VERSION, version)
