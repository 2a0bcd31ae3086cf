"""What the ServingBaseline step runs (its executor: components/function_executor.py says why it
is apart from component.py, which says what it does)."""


import os
from typing import Optional

import tensorflow as tf

from components.function_executor import FunctionExecutor
from core import rollout as rollouts
from core import storage

# Read by components.evaluator.component to drop an empty baseline.
HAS_BASELINE = "has_baseline"
SERVING_VERSION = "serving_version"


def latest_version(model_base_path: str) -> Optional[str]:
    """The version TF Serving's default policy (latest) serves: the highest complete number."""
    if not tf.io.gfile.isdir(model_base_path):
        return None
    names = [v.rstrip("/") for v in tf.io.gfile.listdir(model_base_path)]
    return storage.newest_version(
        n for n in names if storage.is_version(n)
        and tf.io.gfile.exists(os.path.join(model_base_path, n, "saved_model.pb")))


class BaselineError(RuntimeError):
    """The Rollout's stable version cannot be the baseline."""


def complete(model_base_path: str, version: str) -> bool:
    return tf.io.gfile.exists(os.path.join(model_base_path, version, "saved_model.pb"))


def stable_version(model_base_path: str, rollout: str,
                   cluster: Optional[rollouts.Cluster] = None) -> Optional[str]:
    """The Rollout's stable version ("namespace/name"), None when nothing was promoted yet; never
    a version whose canary the Rollout aborted."""
    namespace, _, name = rollout.partition("/")
    try:
        cluster = cluster or rollouts.Cluster.connect()
        state = rollouts.read_rollout(cluster, namespace, name)
    except rollouts.ReleaseError as error:
        raise BaselineError(f"serving.release is canary, and the baseline is the Rollout "
                            f"{rollout}'s stable version: {error}") from None
    version = rollouts.stable_version(state)
    if version is None:
        return None
    if state.get("status", {}).get("abort") and version == rollouts.pod_version(state):
        raise BaselineError(f"the Rollout {rollout} names its aborted version {version} as stable "
                            "(its tf-serving/stable-model-version annotation): fix the annotation")
    if not complete(model_base_path, version):
        raise BaselineError(f"the Rollout {rollout}'s stable version {version} is not under "
                            f"{model_base_path} (no {version}/saved_model.pb): the stable pods "
                            "serve a model this pipeline cannot read")
    return version


def baseline_version(model_base_path: str, rollout: str = "",
                     cluster: Optional[rollouts.Cluster] = None) -> Optional[str]:
    """What serves: the Rollout's stable version with a rollout (serving.release: canary), else
    the newest complete version (direct)."""
    if rollout:
        return stable_version(model_base_path, rollout, cluster)
    return latest_version(model_base_path)


def copy_tree(source: str, destination: str) -> None:
    for directory, _, files in tf.io.gfile.walk(source):
        target = os.path.join(destination, os.path.relpath(directory, source))
        storage.makedirs(target, tf.io.gfile.makedirs)
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target, name),
                             overwrite=True)


def serving_baseline(candidate, baseline, model_base_path: str, code_fingerprint: str,
                     rollout: str = "") -> None:
    """`candidate` is taken only so that a new model re-resolves the baseline, code_fingerprint
    so that editing this step's code (or the Evaluator executor's) re-runs it (cache keys).
    rollout: "namespace/name" of the serving Rollout under serving.release: canary; not set
    (direct), the step and its cache key are as before canary releases existed."""
    del candidate, code_fingerprint
    version = baseline_version(model_base_path, rollout)
    baseline.set_int_custom_property(HAS_BASELINE, int(version is not None))
    if version is not None:
        copy_tree(os.path.join(model_base_path, version),
                  os.path.join(baseline.uri, "Format-Serving"))
        baseline.set_string_custom_property(SERVING_VERSION, version)


class Executor(FunctionExecutor):
    FUNCTION = staticmethod(serving_baseline)
