"""Validates custom resources against the CRDs of deploy/crds/ (vendored, or fetched at set-up
into .cache/crds by scripts/fetch_crds.sh), as the API server does on a create with
`fieldValidation=Strict` (the default of `kubectl apply --validate=strict`).

The openAPIV3Schema of a CRD is a structural schema: a field it does not name is pruned
(k8s.io/apiextensions-apiserver pkg/apiserver/schema/pruning/algorithm.go), and under Strict
field validation pruning is an error. So every object node refuses unknown fields unless it
has `additionalProperties` (a map) or `x-kubernetes-preserve-unknown-fields: true`; an object
node that lists no properties at all keeps nothing (pruning removes every field of it). The
Kubernetes extensions are honoured as in pkg/apiserver/schema (structural.go, validation.go):
`x-kubernetes-int-or-string` admits an integer or a string, `x-kubernetes-embedded-resource`
admits apiVersion, kind and metadata, `nullable` admits null, and apiVersion, kind and
metadata at the root are the API server's own (metadata as ObjectMeta, strictly too).

Not checked: `x-kubernetes-validations` (CEL, evaluated by the API server only) and the
operators' admission webhooks (deploy/crds/README.md says which).
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Tuple

from tests.helpers import load_yaml

if TYPE_CHECKING:  # imported where used: 2.4 s, not at collection
    import jsonschema

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy" / "crds"
# The CRDs fetched at set-up instead of vendored (scripts/fetch_crds.sh, `make tools`): the same
# layout, <project>-<version>/<file>, and the same digests in deploy/crds/README.md.
FETCHED = ROOT / ".cache" / "crds"

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# The ObjectMeta fields a manifest may set (k8s.io/apimachinery pkg/apis/meta/v1/types.go);
# the server-set ones (uid, resourceVersion, creationTimestamp...) are accepted there too.
OBJECT_META = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "name": {"type": "string"}, "generateName": {"type": "string"},
        "namespace": {"type": "string"}, "labels": _STRING_MAP, "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["apiVersion", "kind", "name", "uid"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "name": {"type": "string"}, "uid": {"type": "string"},
                           "controller": {"type": "boolean"},
                           "blockOwnerDeletion": {"type": "boolean"}}}},
        "uid": {"type": "string"}, "resourceVersion": {"type": "string"},
        "generation": {"type": "integer"}, "creationTimestamp": {"type": ["string", "null"]},
        "deletionTimestamp": {"type": "string"},
        "deletionGracePeriodSeconds": {"type": "integer"},
        "managedFields": {"type": "array"}}}


def strict(node):
    """The schema with Kubernetes' structural semantics spelled out for jsonschema."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: strict(value) for key, value in node.items()}
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-embedded-resource"):
        properties = node.setdefault("properties", {})
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        properties.setdefault("metadata", OBJECT_META)
    is_object = node.get("type") == "object" or "properties" in node
    if (is_object and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        node["additionalProperties"] = False
    if node.get("nullable") and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    return node


def crd_files() -> List[Path]:
    """The vendored CRDs and the fetched ones; a fetched one missing stops with the fix."""
    fetched = [FETCHED / name for name in pinned_sha256() if not (CRDS / name).exists()]
    missing = [str(path) for path in fetched if not path.exists()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing: run `make tools` "
                                "(scripts/fetch_crds.sh fetches them once)")
    return sorted([p for p in CRDS.glob("*/*") if p.suffix in (".yaml", ".yml")] + fetched)


def relative(path: Path) -> str:
    """A CRD's name as deploy/crds/README.md writes it: <project>-<version>/<file>."""
    return str(path.relative_to(CRDS if path.is_relative_to(CRDS) else FETCHED))


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> dict:
    """A CRD, parsed once: the index and each kind's validator read it (never mutated: strict
    builds new nodes)."""
    return load_yaml(path.read_text())


@functools.lru_cache(maxsize=None)
def _index() -> Dict[Tuple[str, str], Path]:
    index = {}
    for path in crd_files():
        crd = _load(path)
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                index[(f"{crd['spec']['group']}/{version['name']}",
                       crd["spec"]["names"]["kind"])] = path
    return index


def serves(api_version: str, kind: str) -> bool:
    """Whether a vendored CRD serves this apiVersion and kind."""
    return (api_version, kind) in _index()


@functools.lru_cache(maxsize=None)
def validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    try:
        path = _index()[(api_version, kind)]
    except KeyError:
        raise KeyError(f"no CRD in {CRDS} or {FETCHED} serves {api_version} {kind}") from None
    crd = _load(path)
    (served,) = [v for v in crd["spec"]["versions"]
                 if f"{crd['spec']['group']}/{v['name']}" == api_version]
    schema = strict(served["schema"]["openAPIV3Schema"])
    schema["properties"]["apiVersion"] = {"const": api_version}
    schema["properties"]["kind"] = {"const": kind}
    schema["properties"]["metadata"] = {**OBJECT_META, "required": ["name"]}
    schema.setdefault("required", [])
    schema["required"] = sorted(set(schema["required"]) | {"apiVersion", "kind", "metadata"})
    import jsonschema

    return jsonschema.Draft7Validator(schema)


def errors(doc: dict) -> List[str]:
    """Why the API server would refuse `doc` under strict field validation ([] if it would
    not), one 'path: message' each."""
    found = validator(doc.get("apiVersion", ""), doc.get("kind", ""))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in found.iter_errors(doc)]


def pinned_sha256() -> Dict[str, str]:
    """{file path under deploy/crds: sha256} as deploy/crds/README.md records them."""
    text = (CRDS / "README.md").read_text()
    return {path: digest for path, digest in re.findall(
        r"^\| `([^`]+)`(?: \(fetched\))? \|.*\| `([0-9a-f]{64})` \|$", text, flags=re.M)}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
