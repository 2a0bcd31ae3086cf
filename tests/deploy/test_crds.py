"""deploy/crds: the vendored CRDs are the release files README.md names, and the strict
validator (tests/deploy/crd_schema.py) refuses what the API server would refuse."""
from __future__ import annotations

import copy

import pytest

from tests.deploy import crd_schema

MINIMAL = {
    ("flink.apache.org/v1beta1", "FlinkDeployment"): {
        "spec": {"flinkVersion": "v1_18", "image": "flink:1.18",
                 "jobManager": {"resource": {"cpu": 1, "memory": "1024m"}},
                 "taskManager": {"resource": {"cpu": 1, "memory": "1024m"}}}},
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): {
        "spec": {"runtimeRef": {"name": "r"}, "trainer": {"numNodes": 2}}},
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): {
        "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
            "spec": {"template": {"spec": {"containers": [
                {"name": "node", "image": "i"}]}}}}}]}}}},
}


def minimal(api_version: str, kind: str) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"},
            **copy.deepcopy(MINIMAL[(api_version, kind)])}


def test_every_vendored_crd_has_the_digest_the_readme_pins():
    pinned = crd_schema.pinned_sha256()
    files = {crd_schema.relative(p): p for p in crd_schema.crd_files()}
    assert set(pinned) == set(files), "deploy/crds/README.md and the folders disagree"
    for name, path in files.items():
        assert crd_schema.sha256(path) == pinned[name], f"{name} is not the vendored release file"


@pytest.mark.parametrize("key", MINIMAL, ids=lambda key: key[1])
def test_a_minimal_resource_validates(key):
    assert crd_schema.errors(minimal(*key)) == []


@pytest.mark.parametrize("key", MINIMAL, ids=lambda key: key[1])
def test_a_misspelt_field_is_refused(key):
    doc = minimal(*key)
    doc["spec"]["templete"] = {}
    assert any("templete" in e for e in crd_schema.errors(doc))


@pytest.mark.parametrize("key", MINIMAL, ids=lambda key: key[1])
def test_an_unknown_metadata_field_is_refused(key):
    doc = minimal(*key)
    doc["metadata"]["label"] = {"a": "b"}
    assert any("label" in e for e in crd_schema.errors(doc))


def test_a_wrong_type_and_a_bad_enum_are_refused():
    job = minimal("trainer.kubeflow.org/v1alpha1", "TrainJob")
    job["spec"]["trainer"]["numNodes"] = "two"
    assert any("numNodes" in e for e in crd_schema.errors(job))
    flink = minimal("flink.apache.org/v1beta1", "FlinkDeployment")
    flink["spec"]["flinkVersion"] = "1.18"
    assert any("flinkVersion" in e for e in crd_schema.errors(flink))


def test_a_field_deep_in_an_embedded_pod_template_is_checked():
    runtime = minimal("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]
    pod["containers"][0]["securityContext"] = {"readOnlyRootFilesytem": True}
    assert any("readOnlyRootFilesytem" in e for e in crd_schema.errors(runtime))


def test_preserved_unknown_fields_and_int_or_string_are_honoured():
    flink = minimal("flink.apache.org/v1beta1", "FlinkDeployment")
    # flinkConfiguration keeps unknown fields (x-kubernetes-preserve-unknown-fields).
    flink["spec"]["flinkConfiguration"] = {"any.key": "1"}
    # A container port's targetPort-like int-or-string: resources are quantities.
    flink["spec"]["taskManager"]["podTemplate"] = {"spec": {"containers": [{
        "name": "c", "resources": {"limits": {"cpu": 2, "memory": "1Gi"}},
        "livenessProbe": {"tcpSocket": {"port": "beam"}}}]}}
    assert crd_schema.errors(flink) == []
    flink["spec"]["taskManager"]["podTemplate"]["spec"]["containers"][0]["livenessProbe"][
        "tcpSocket"]["port"] = [1]
    assert any("port" in e for e in crd_schema.errors(flink))


def test_an_object_without_listed_properties_keeps_nothing():
    """The API server prunes every field of an object node that lists none (structural
    schema): strict, that is an error, not a pass."""
    schema = crd_schema.strict({"type": "object", "properties": {"a": {"type": "object"}}})
    import jsonschema

    assert list(jsonschema.Draft7Validator(schema).iter_errors({"a": {"b": 1}}))
    assert not list(jsonschema.Draft7Validator(schema).iter_errors({"a": {}}))
