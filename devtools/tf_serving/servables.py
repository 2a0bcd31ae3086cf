"""Which loaded version a request names, shared by the REST and gRPC stand-ins (rest_stub.py,
grpc_stub.py), with TF Serving's texts at 2.16.1 and 2.20.0 (the same at both tags).

A REST path and a gRPC ModelSpec both end in a core/manager.h ServableRequest: Latest(name) or
Specific(name, version); a version label becomes Specific (model_servers/server_core.cc
ServableRequestFromModelSpec, GetModelVersionForLabel). The manager answers NOT_FOUND for one it
has not loaded (core/basic_manager.cc GetUntypedServableHandle).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION = "NOT_FOUND", "INVALID_ARGUMENT", \
    "FAILED_PRECONDITION"


class ServableError(Exception):
    """A status TF Serving answers: `code` as absl::StatusCode's name, the message as sent."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class Servables:
    """One model's loaded versions and its version labels (label -> version)."""

    def __init__(self, model_name: str, versions: Iterable[int],
                 labels: Optional[Mapping[str, int]] = None):
        self.model_name = model_name
        self.versions = set(versions)
        self.labels = dict(labels or {})
        for version in self.labels.values():
            if version not in self.versions:
                # server_core.cc UpdateModelVersionLabelMap: a label may only point at an
                # AVAILABLE version (allow_version_labels_for_unavailable_models is off by
                # default); the config is refused, so the server does not start with it.
                raise ServableError(FAILED_PRECONDITION, (
                    f"Request to assign label to version {version} of model {model_name}, "
                    "which is not currently available for inference"))

    def resolve(self, name: str, version: Optional[int] = None,
                label: Optional[str] = None) -> int:
        """The version that serves `name` [at `version` | with `label`], or ServableError."""
        if label is not None:
            # server_core.cc GetModelVersionForLabel; labels are allowed (allow_version_labels
            # defaults to true in ServerCore::Options).
            if name != self.model_name or label not in self.labels:
                raise ServableError(INVALID_ARGUMENT,
                                    f"Unrecognized servable version label: {label}")
            version = self.labels[label]
        request = f"Latest({name})" if version is None else f"Specific({name}, {version})"
        if name != self.model_name or not self.versions or \
                (version is not None and version not in self.versions):
            raise ServableError(NOT_FOUND, f"Servable not found for request: {request}")
        return max(self.versions) if version is None else version
