"""TFX's Pusher executor with a push that a kill cannot leave half-done where TF Serving looks.

TFX's Pusher (tfx/components/pusher/executor.py, Executor.Do, TFX 1.16) copies the model straight
into <base>/<version>/ (tfx/utils/io_utils.py copy_dir, then saved_model.pb last). TF Serving
takes every child of the base whose name is all digits as a version, complete or not
(sources/storage_path/file_system_storage_path_source.cc): a kill during the copy leaves a
numbered folder without saved_model.pb that its version policy (latest, num_versions) counts and
tries to load. This executor changes only where that copy lands:

- a local base: TFX's own Do pushes into a hidden folder on the same file system,
  <base>/.push-<random>/<version> (not all digits: TF Serving never looks in it), which is then
  renamed to <base>/<version> (rename(2): atomic on one file system). The version appears whole
  or not at all.
- an object store (s3://, gs://): there is no rename (tensorflow-io's S3 RenameFile copies object
  by object in listing order, saved_model.pb before variables/), so TFX's own push is kept: it
  writes every object of the version before saved_model.pb, and a numbered prefix without
  saved_model.pb is a push that did not finish.

Either way a push first removes what an unfinished one left under the base: hidden `.push-*`
folders and numbered folders without saved_model.pb (the ones core/storage.py and the serving
baseline already skip), logging each. (Two pipelines pushing to one base at the same moment
would remove each other's unfinished copy: one base belongs to one pipeline.)

On Kubeflow the push also needs the run's lease (core/run_lease.py): when the step's
entrypoint says the run is under one (run_lease.PUSH_GUARD_ENV), the executor first checks that
its run still holds the lease and otherwise fails naming the holder, before it touches the base.

The outputs are TFX's own: the archived copy in the PushedModel artifact and its properties
pushed, pushed_destination (<base>/<version>) and pushed_version, which the run report, the
release step and the serving baseline read.
"""
from __future__ import annotations

import logging
import os
import uuid
from typing import Any, Dict, List

import tensorflow as tf
from tfx import types
from tfx.components.pusher import executor as tfx_pusher
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from core import lease_stores, run_lease, storage

STAGING = ".push-"  # the hidden folder's prefix: never all digits, so never a version
SAVED_MODEL = "saved_model.pb"  # written last by TFX's push: a version is complete with it
# Where renaming a folder into place is atomic: one local file system.
LOCAL = ("", "file")


def unfinished(base: str) -> List[str]:
    """The children of base an unfinished push left: hidden staging folders, and numbered
    folders without saved_model.pb."""
    if not tf.io.gfile.isdir(base):
        return []
    names = [n.rstrip("/") for n in tf.io.gfile.listdir(base)]
    return sorted(n for n in names if n.startswith(STAGING) or (
        storage.is_version(n) and not tf.io.gfile.exists(os.path.join(base, n, SAVED_MODEL))))


def clean(base: str) -> List[str]:
    """Removes what unfinished pushes left under base; the paths it removed."""
    removed = []
    for name in unfinished(base):
        path = os.path.join(base, name)
        logging.warning("Pusher: removing %s, left by a push that did not finish", path)
        tf.io.gfile.rmtree(path)
        removed.append(path)
    return removed


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


class Executor(tfx_pusher.Executor):
    """TFX's Pusher executor; on a local base its copy goes through a hidden folder renamed into
    place (module docstring)."""

    def Do(self, input_dict: Dict[str, List[types.Artifact]],  # noqa: N802 (TFX's name)
           output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]) -> None:
        guard = run_lease.push_guard(os.environ)
        if guard is not None:  # another run may be pushing against the same baseline
            run_lease.require(lease_stores.open_store(guard[0]), guard[1])
        key = standard_component_specs.PUSH_DESTINATION_KEY
        destination = proto_utils.json_to_proto(exec_properties[key],
                                                pusher_pb2.PushDestination())
        if destination.WhichOneof("destination") != "filesystem":
            return super().Do(input_dict, output_dict, exec_properties)
        base = destination.filesystem.base_directory
        clean(base)
        if storage.scheme(base) not in LOCAL:
            return super().Do(input_dict, output_dict, exec_properties)
        staging = os.path.join(base, f"{STAGING}{uuid.uuid4().hex[:12]}")
        destination.filesystem.base_directory = staging
        try:
            super().Do(input_dict, output_dict,
                       {**exec_properties, key: proto_utils.proto_to_json(destination)})
            pushed = artifact_utils.get_single_instance(
                output_dict[standard_component_specs.PUSHED_MODEL_KEY])
            if pushed.get_int_custom_property(tfx_pusher._PUSHED_KEY):
                version = pushed.get_string_custom_property(tfx_pusher._PUSHED_VERSION_KEY)
                target = os.path.join(base, version)
                if tf.io.gfile.exists(target):  # as TFX: a version already there is kept
                    logging.info("Destination directory %s already exists, skipping current "
                                 "push.", target)
                else:
                    os.rename(_local(os.path.join(staging, version)), _local(target))
                    logging.info("Model moved into place at %s.", target)
                pushed.set_string_custom_property(tfx_pusher._PUSHED_DESTINATION_KEY, target)
        finally:
            if tf.io.gfile.exists(staging):
                tf.io.gfile.rmtree(staging)
        return None
