"""The run report's readings that differ by runner: a custom property however KFP or TFX kept
it, the run id in KFP 2.3 and 2.4.1+ output URIs, and a refused threshold in words."""
from __future__ import annotations

import posixpath

import pytest

from tests.components import kfp_artifacts

RUN_ID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
SALT = "5d9e3c1a-7b2f-4e6d-9a8c-1f0e2d3c4b5a"  # driver.go: uuid.NewString()
PIPELINE, TASK, KEY = "nightly", "RunReport", "html"


def _artifact(**values):
    from ml_metadata.proto import metadata_store_pb2

    artifact = metadata_store_pb2.Artifact(uri="s3://b/x")
    for key, value in values.items():
        artifact.custom_properties[key].CopyFrom(value)
    return artifact


def test_a_local_runs_plain_values_read_as_set():
    from ml_metadata.proto import metadata_store_pb2 as pb

    from components.run_report.mlmd import flag, property_value

    artifact = _artifact(blessed=pb.Value(int_value=0), version=pb.Value(string_value="17"),
                         score=pb.Value(double_value=0.25))
    assert flag(artifact, "blessed") is False
    assert property_value(artifact, "version") == "17"
    assert property_value(artifact, "score") == 0.25
    assert property_value(artifact, "absent") is None and flag(artifact, "absent") is None


def test_kfps_store_values_read_as_the_component_set_them():
    """converter.go StructValueToMLMDValue: numbers as doubles, bools as ints, lists and dicts
    wrapped in a struct."""
    from components.run_report.mlmd import flag, property_value

    artifact = _artifact(**kfp_artifacts.kfp_store_values(
        {"blessed": 0, "pushed": True, "serving_version": "17", "splits": ["train", "eval"],
         "window": {"spans": 3}}, "blessing"))
    assert artifact.custom_properties["blessed"].double_value == 0.0
    assert flag(artifact, "blessed") is False and flag(artifact, "pushed") is True
    assert property_value(artifact, "serving_version") == "17"
    assert property_value(artifact, "splits") == ["train", "eval"]
    assert property_value(artifact, "window") == {"spans": 3}
    assert property_value(artifact, "display_name") == "blessing"


def test_a_steps_struct_wrapped_values_read_as_the_component_set_them():
    """In the step, TFX wraps every metadata field the driver passed in a struct_value."""
    from tfx.types import standard_artifacts

    from components.run_report.mlmd import flag, property_value

    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = "s3://b/blessing"
    blessing.set_int_custom_property("blessed", 0)
    blessing.set_string_custom_property("current_model", "s3://b/model")
    [parsed] = kfp_artifacts.parse_in_step(
        {"blessing": [kfp_artifacts.runtime_artifact(blessing, "blessing", 4)]})["blessing"]
    recorded = parsed.mlmd_artifact
    assert recorded.custom_properties["blessed"].HasField("struct_value")
    assert bool(recorded.custom_properties["blessed"].struct_value)  # the old reading's truth
    assert flag(recorded, "blessed") is False
    assert property_value(recorded, "current_model") == "s3://b/model"


def test_a_value_that_is_not_a_flag_or_a_packed_proto_is_an_error():
    from google.protobuf import any_pb2, struct_pb2
    from ml_metadata.proto import metadata_store_pb2 as pb

    from components.run_report.mlmd import flag, property_value

    wrapped = struct_pb2.Struct()
    wrapped.update({"__value__": "yes"})
    with pytest.raises(ValueError, match="'blessed' of s3://b/x is 'yes', not 0 or 1"):
        flag(_artifact(blessed=pb.Value(struct_value=wrapped)), "blessed")
    packed = any_pb2.Any()
    packed.Pack(struct_pb2.Struct())
    with pytest.raises(ValueError, match="packed proto.*google.protobuf.Struct"):
        property_value(_artifact(blessed=pb.Value(proto_value=packed)), "blessed")


def generate_output_uri(root: str, paths: list, preserve_query: bool) -> str:
    """backend/src/v2/metadata/client.go GenerateOutputURI (2.3.0, 2.4.1, 2.17.0 alike)."""
    root, _, query = root.partition("?")
    return (f"{root.rstrip('/')}/{posixpath.normpath(posixpath.join(*paths))}"
            + (f"?{query}" if preserve_query and query else ""))


def output_uri(version: str, root: str) -> str:
    """An output artifact's URI as each backend version builds it."""
    run_root = generate_output_uri(root, [PIPELINE, RUN_ID], True)  # client.go GetPipeline
    if version == "2.3.0":  # driver.go provisionOutputs
        return generate_output_uri(run_root, [TASK, KEY], False)
    if version == "2.4.1":  # driver.go provisionOutputs, with outputUriSalt
        return generate_output_uri(run_root, [TASK, SALT, KEY], False)
    # 2.17.0 driver.go provisionOutputs: the task root, then each output under it
    return generate_output_uri(generate_output_uri(run_root, [TASK, SALT], False), [KEY], False)


ROOTS = ("s3://mlpipeline/v2/artifacts", "minio://mlpipeline/v2/artifacts/",
         "s3://acme-ml/tfx?region=eu-west-1&endpoint=minio.kubeflow:9000",
         f"gs://acme-ml/{PIPELINE}")  # a root that ends with the pipeline's name


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("version", ("2.3.0", "2.4.1", "2.17.0"))
def test_the_run_id_is_read_from_each_backend_versions_output_uris(version, root):
    from components.run_report.kfp_paths import run_id_from_uri

    uri = output_uri(version, root)
    assert "?" not in uri and uri.endswith(f"/{TASK}/{KEY}" if version == "2.3.0" else
                                           f"/{TASK}/{SALT}/{KEY}")
    assert run_id_from_uri(uri, PIPELINE, TASK, KEY) == RUN_ID
    # Negative control: counting from the end (the old reading) finds the task on 2.4.1+.
    old = uri.rstrip("/").split("/")[-3]
    assert (old == RUN_ID) == (version == "2.3.0")


def test_a_uri_of_neither_layout_is_an_error():
    from components.run_report.kfp_paths import run_id_from_uri

    for uri in (f"s3://b/{PIPELINE}/{RUN_ID}/Trainer/{KEY}",  # another task's output
                f"s3://b/other/{RUN_ID}/{TASK}/{KEY}",  # another pipeline
                f"s3://b/{PIPELINE}/{RUN_ID}/{TASK}/a/b/{KEY}"):  # two extra components
        with pytest.raises(ValueError, match=f"no run id in the output URI '{uri}'"):
            run_id_from_uri(uri, PIPELINE, TASK, KEY)


@pytest.mark.parametrize("refusal, words", [
    (dict(is_diff=False, value=0.5178, lower_bound=0.7),
     "auc on Overall = 0.5178, below the lower bound 0.7"),
    (dict(is_diff=False, value=0.99, lower_bound=0.5, upper_bound=0.95),
     "auc on Overall = 0.9900, above the upper bound 0.95"),
    (dict(is_diff=True, value=-0.15, higher_is_better=True, absolute=-0.1),
     "auc (change vs baseline) on Overall = -0.1500, a decrease over the allowed 0.1"),
    (dict(is_diff=True, value=0.3, higher_is_better=False, absolute=0.2),
     "auc (change vs baseline) on Overall = 0.3000, an increase over the allowed 0.2"),
    (dict(is_diff=True, value=0.01, higher_is_better=True, absolute=0.05),
     "auc (change vs baseline) on Overall = 0.0100, less than the required increase 0.05"),
    (dict(is_diff=True, value=-0.2, higher_is_better=True, relative=-0.1),
     "auc (change vs baseline) on Overall = -0.2000, outside the allowed relative change (at "
     "least -0.1 of the baseline)"),
    (dict(is_diff=False, value=None, lower_bound=0.7),
     "auc on Overall: not computed, so no bound can hold"),
])
def test_a_refused_threshold_is_said_in_words(refusal, words):
    from components.run_report import words as say
    from components.run_report.facts import Refusal

    assert say.refusal(Refusal(metric="auc", slice="Overall", **refusal)) == words


def test_the_one_table_of_report_types_names_the_components_outputs_and_classes():
    """core/nodes.py REPORT_OUTPUTS, read by the component, the spec's retitling and the step's
    entrypoint: each class path imports the class the component declares for that output."""
    from tfx.utils import import_utils

    from components.run_report.component import RunReport
    from core.nodes import REPORT_OUTPUTS

    outputs = RunReport.SPEC_CLASS.OUTPUTS
    assert set(outputs) == set(REPORT_OUTPUTS)
    for key, names in REPORT_OUTPUTS.items():
        kind = import_utils.import_class_by_path(names.tfx_class)
        assert outputs[key].type is kind and kind.TYPE_NAME == names.tfx_type
        assert names.kfp_type.startswith("system.")
