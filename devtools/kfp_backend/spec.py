"""What a run is given: the compiled spec (as the API server parses it on upload) and the
Kubernetes objects the driver and the kubelet read (the kfp-launcher ConfigMap, Secrets,
ConfigMaps), each from YAML as `kubectl get -o yaml` prints it."""
from __future__ import annotations

import base64
from pathlib import Path

import yaml

from devtools.kfp_backend.errors import SpecError

LAUNCHER_CONFIGMAP = "kfp-launcher"  # config/env.go: configMapName


def load_spec(path: Path) -> tuple[dict, dict | None]:
    """(PipelineSpec, kubernetes PlatformSpec or None), after checking both parse as protos."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    documents = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    if not documents:
        raise SpecError(f"{path} is empty")
    spec, platform = documents[0], (documents[1] if len(documents) > 1 else None)
    try:
        json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
        if platform is not None:
            json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())
    except json_format.ParseError as error:
        raise SpecError(f"{path} is not a KFP PipelineSpec (+ PlatformSpec): {error}") from None
    return spec, platform


def read_launcher_config(path: Path) -> dict:
    """The kfp-launcher ConfigMap, as `kubectl get cm kfp-launcher -o yaml` prints it."""
    config = yaml.safe_load(Path(path).read_text())
    if not isinstance(config, dict) or config.get("kind") != "ConfigMap":
        raise SpecError(f"{path}: not a Kubernetes ConfigMap (kind: ConfigMap)")
    name = (config.get("metadata") or {}).get("name")
    if name != LAUNCHER_CONFIGMAP:
        raise SpecError(f"{path}: the ConfigMap is named {name!r}; the driver reads only "
                        f"{LAUNCHER_CONFIGMAP!r} (config/env.go FromConfigMap)")
    return config


def read_secrets(path: Path) -> dict[str, dict[str, str]]:
    """Kubernetes Secret objects (one per YAML document, or a List) -> {name: {key: value}}."""
    return _read_objects(path, "Secret")


def read_config_maps(path: Path) -> dict[str, dict[str, str]]:
    """Kubernetes ConfigMap objects -> {name: {key: value}}."""
    return _read_objects(path, "ConfigMap")


def _read_objects(path: Path, kind: str) -> dict[str, dict[str, str]]:
    found = {}
    for document in yaml.safe_load_all(Path(path).read_text()):
        items = (document or {}).get("items", []) if (document or {}).get(
            "kind") == "List" else [document]
        for item in items:
            if not item:
                continue
            if item.get("kind") != kind:
                raise SpecError(f"{path}: a {item.get('kind')!r} where a {kind} was expected")
            values = ({k: base64.b64decode(v).decode() for k, v in (item.get("data") or {}).items()}
                      if kind == "Secret" else dict(item.get("data") or {}))
            values.update(item.get("stringData") or {})
            found[item["metadata"]["name"]] = values
    return found
