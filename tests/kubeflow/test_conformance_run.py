"""The compiled spec itself, run here task by task as open-source KFP's launcher would run it.

`python -m pipeline.kubeflow.conformance` runs each step as the container command the spec names, with the
ExecutorInput the launcher would pass, so this checks the compiled artifact, not the Python that
produced it. Three nights: a first run against the model that serves now, a night with no new
span, a night with one.
"""
from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml

from tests.helpers import (add_span, copy_spans, kubeflow_local_changes, run_cli, versions,
                           write_config)

pytestmark = pytest.mark.e2e
SPANS_2007_TO_2009 = 110 + 114 + 120


def kfp_local(spec, root, *args):
    result = run_cli("pipeline.kubeflow.conformance", str(spec), "--pipeline-root", str(root), *args,
                     timeout=1800)
    record = None
    found = re.search(r"details:\s+(\S+)", result.stdout)
    if found:
        record = json.loads(open(found.group(1)).read())["tasks"]
    return result, record


def count_examples(examples_uri: str) -> int:
    import tensorflow as tf

    files = tf.io.gfile.glob(f"{examples_uri}/Split-*/*.gz")
    return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))


@pytest.fixture(scope="module")
def nights(tmp_path_factory, pushed_run):
    folder = tmp_path_factory.mktemp("kfp_local")
    data = copy_spans(folder)
    # What serves now: the session's locally pushed model, so the first night has a baseline.
    serving = folder / "serving" / "penguins"
    shutil.copytree(pushed_run.version_dir, serving / pushed_run.version_dir.name)
    config = write_config(folder, kubeflow_local_changes(folder, data), data_dir=data)
    compiled = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    spec, root = folder / "spec" / "penguins.yaml", folder / "root"
    first = kfp_local(spec, root)
    first_versions = versions(serving)
    second = kfp_local(spec, root)
    add_span(data, "span-20101231")
    third = kfp_local(spec, root, "--until", "CsvExampleGen")
    return {"first": first, "second": second, "third": third, "serving": serving,
            "seeded": pushed_run.version_dir.name, "first_versions": first_versions}


def test_first_night_validates_trains_evaluates_against_what_serves_and_pushes(nights):
    result, tasks = nights["first"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert {t["status"] for t in tasks.values()} == {"ran"}
    assert len(tasks) == 11
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]
    assert count_examples(examples["uri"]) == SPANS_2007_TO_2009  # the window of 3 spans
    assert tasks["AnomalyGate"]["status"] == "ran"
    baseline = tasks["ServingBaseline"]["artifacts"]["baseline"]["metadata"]
    assert baseline["has_baseline"] == 1 and baseline["serving_version"] == nights["seeded"]
    blessing = tasks["Evaluator"]["artifacts"]["blessing"]["metadata"]
    assert blessing["blessed"] == 1
    assert blessing["baseline_model"] == tasks["ServingBaseline"]["artifacts"]["baseline"]["uri"]
    pushed = tasks["Pusher"]["artifacts"]["pushed_model"]["metadata"]
    assert pushed["pushed"] == 1
    assert nights["first_versions"] == sorted([nights["seeded"], pushed["pushed_version"]])
    assert (nights["serving"] / pushed["pushed_version"] / "saved_model.pb").is_file()


def test_a_night_without_a_new_span_is_all_cache_hits(nights):
    result, tasks = nights["second"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert [n for n, t in tasks.items() if t["status"] == "ran"] == ["CsvExampleGenDriver"]
    assert len([t for t in tasks.values() if t["status"] == "cached"]) == 10
    first = nights["first"][1]
    assert tasks["Pusher"]["artifacts"] == first["Pusher"]["artifacts"]


def test_a_new_span_is_new_work_on_the_newest_window(nights):
    result, tasks = nights["third"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert tasks["CsvExampleGenDriver"]["parameters"]["span"] > (
        nights["second"][1]["CsvExampleGenDriver"]["parameters"]["span"])
    assert tasks["CsvExampleGen"]["status"] == "ran"
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]
    assert count_examples(examples["uri"]) == 114 + 120 + 120  # 2008, 2009, the new copy
    assert set(tasks) == {"CsvExampleGenDriver", "CsvExampleGen"}


@pytest.fixture(scope="module")
def vertex_spec(tmp_path_factory):
    """The spec as TFX compiles it (for Vertex), without pipeline.kubeflow's adaptation."""
    from tfx.orchestration.kubeflow.v2.kubeflow_v2_dag_runner import (
        KubeflowV2DagRunner, KubeflowV2DagRunnerConfig)

    from pipeline.config import load_config
    from pipeline.pipeline import build_pipeline

    folder = tmp_path_factory.mktemp("vertex_spec")
    config = load_config(write_config(folder, data_dir=copy_spans(folder)))
    spec = KubeflowV2DagRunner(KubeflowV2DagRunnerConfig(
        default_image="tfx-pipeline-template:test", use_pipeline_spec_2_1=True)).run(
        build_pipeline(config), write_out=False)["pipelineSpec"]
    path = folder / "vertex.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path, folder


def test_without_its_driver_task_example_gen_finds_no_span_on_open_source_kfp(vertex_spec):
    """Why pipeline.kubeflow moves the driver out of lifecycle.preCacheCheck."""
    path, folder = vertex_spec
    result, tasks = kfp_local(path, folder / "oss-root", "--until", "CsvExampleGen")
    assert result.returncode == 1
    assert "lifecycle.preCacheCheck ignored" in result.stdout
    assert "DataError: no data files match" in result.stderr


def test_vertex_runs_the_pre_cache_check_driver_first(vertex_spec):
    path, folder = vertex_spec
    result, tasks = kfp_local(path, folder / "vertex-root", "--until", "CsvExampleGen", "--vertex")
    assert result.returncode == 0, result.stdout + result.stderr
    from tfx.components.example_gen.utils import date_to_span_number

    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]
    # The driver's span reached the artifact (as a custom property: Examples has one named span).
    assert examples["metadata"]["custom:span"] == date_to_span_number(2009, 12, 31)
    assert count_examples(examples["uri"]) == SPANS_2007_TO_2009
