"""The compiled spec, run task by task through the conformance runner (pipeline.kubeflow.
conformance) as open-source KFP 2.3.0's driver and launcher run it, from the image emulated from
deploy/kubeflow/Dockerfile (the project as its wheel installs it, configs/ at /opt/pipeline).

Three nights on one root: a first run against the model that serves now; an unchanged night (all
cache hits but the never-cached driver); a night whose new span is anomalous (new work, the gate
stops it, the Pusher never runs, the serving dir is unchanged). Plus the negative controls: the
spec without our entrypoint dies at StatisticsGen as on the backend; an image without configs/
fails; a run with no root gets KFP's minio:// default and fails clearly.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers import (
    REPO,
    add_anomalous_span,
    copy_spans,
    kubeflow_local_changes,
    run_cli,
    tree_digest,
    versions,
    without_entrypoint,
    write_config,
)

pytestmark = pytest.mark.e2e
SPANS_2007_TO_2009 = 110 + 114 + 120


def conformance(spec, *args, root=None, env=None):
    """`python -m pipeline.kubeflow.conformance` and the run's record (None if none)."""
    result = run_cli("pipeline.kubeflow.conformance", str(spec),
                     *(["--pipeline-root", str(root)] if root else []), *args, timeout=3000,
                     env=env)
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    record = json.loads(Path(found.group(1)).read_text())["tasks"] if found else None
    return result, record


def count_examples(examples_uri: str) -> int:
    import tensorflow as tf

    files = tf.io.gfile.glob(f"{examples_uri}/Split-*/*.gz")
    return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))


@pytest.fixture(scope="session")
def image(step_image):
    """The step image, emulated once per session (tests/conftest.py), shared with test_s3_night."""
    return step_image


def find_in_image(image, *modules, cwd):
    """Where the image's Python finds each module (None: not importable), from cwd."""
    code = ("import importlib.util as u, json, sys; print(json.dumps({m: getattr(u.find_spec(m), "
            "'origin', None) for m in sys.argv[1:]}))")
    result = subprocess.run([str(image / "venv" / "bin" / "python"), "-c", code, *modules],
                            cwd=cwd, capture_output=True, text=True, check=True,
                            env={"PATH": "/usr/bin:/bin"})
    return json.loads(result.stdout)


def test_the_image_imports_the_project_from_its_wheel_not_the_checkout(image, tmp_path):
    found = find_in_image(image, "pipeline", "components", "models", "tfx", cwd=tmp_path)
    for package in ("pipeline", "components", "models"):
        assert found[package].startswith(str(image / "venv")), found
    assert found["tfx"] is not None  # the lock's packages are there


def test_a_package_left_out_of_the_wheel_and_the_image_cannot_be_imported(tmp_path):
    """A packaging gap fails: models/ neither in the wheel nor copied into the WORKDIR."""
    from pipeline.kubeflow.local_image import build

    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md", "pipeline", "components", "models", "configs"):
        source = REPO / name
        (shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__"))
         if source.is_dir() else shutil.copy2(source, context / name))
    pyproject = context / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(', "models*"', ""))
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text((REPO / "deploy/kubeflow/Dockerfile").read_text().replace(
        "COPY models/ models/", ""))
    gap = build(tmp_path / "image", dockerfile, context)
    assert find_in_image(gap, "models", cwd=gap / "workdir")["models"] is None
    assert find_in_image(gap, "pipeline", cwd=tmp_path)["pipeline"] is not None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conformance")
    data = copy_spans(folder)
    config = write_config(folder, kubeflow_local_changes(folder, data), data_dir=data)
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    return folder, data, folder / "spec" / "penguins.yaml"


@pytest.fixture(scope="module")
def nights(compiled, image, pushed_run):
    folder, data, spec = compiled
    # What serves now: the session's locally pushed model, so the first night has a baseline.
    serving = folder / "serving" / "penguins"
    shutil.copytree(pushed_run.version_dir, serving / pushed_run.version_dir.name)
    root, args = folder / "root", ("--image", str(image))
    first = conformance(spec, *args, root=root)
    first_versions = versions(serving)
    second = conformance(spec, *args, root=root)
    before = tree_digest(serving)
    add_anomalous_span(data, "span-20101231")
    third = conformance(spec, *args, root=root)
    return {"first": first, "second": second, "third": third, "serving": serving,
            "seeded": pushed_run.version_dir.name, "first_versions": first_versions,
            "before_third": before}


def test_first_night_validates_trains_evaluates_against_what_serves_and_pushes(nights):
    result, tasks = nights["first"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert {t["status"] for t in tasks.values()} == {"ran"}
    assert len(tasks) == 14
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]
    assert count_examples(examples["uri"]) == SPANS_2007_TO_2009  # the window of 3 spans
    baseline = tasks["ServingBaseline"]["artifacts"]["baseline"]["metadata"]
    assert baseline["has_baseline"] == 1 and baseline["serving_version"] == nights["seeded"]
    blessing = tasks["Evaluator"]["artifacts"]["blessing"]["metadata"]
    assert blessing["blessed"] == 1
    assert blessing["baseline_model"] == tasks["ServingBaseline"]["artifacts"]["baseline"]["uri"]
    pushed = tasks["Pusher"]["artifacts"]["pushed_model"]["metadata"]
    assert pushed["pushed"] == 1
    assert nights["first_versions"] == sorted([nights["seeded"], pushed["pushed_version"]])
    assert (nights["serving"] / pushed["pushed_version"] / "saved_model.pb").is_file()


def test_the_first_nights_report_is_what_the_kfp_ui_renders(nights, tmp_path):
    """The RunReport step's outputs, recorded as the backend records them: the system.* types
    the UI's viewers list (MetricsVisualizations.tsx, KFP 2.3.0), each with a display_name; the
    HTML and Markdown files AT their URIs (the UI reads the object there); the headline metrics
    as the Metrics artifact's numbers. The HTML also passes the browser check."""
    from pipeline.report import render
    from tests.browser import open_page
    from tests.pipeline.test_report_browser import problems

    _, tasks = nights["first"]
    report = tasks["RunReport"]["artifacts"]
    assert {k: a["type"] for k, a in report.items()} == {
        "html": "system.HTML", "markdown": "system.Markdown", "metrics": "system.Metrics"}
    assert all(a["metadata"]["display_name"] for a in report.values())
    html = Path(report["html"]["uri"])
    assert html.is_file() and Path(report["markdown"]["uri"]).is_file()
    assert "**Blessed: every threshold held" in Path(report["markdown"]["uri"]).read_text()
    metrics = report["metrics"]["metadata"]
    assert metrics["blessed"] == 1 and metrics["pushed"] == 1
    assert metrics["drifted_features"] == 0
    assert 0.9 <= metrics["sparse_categorical_accuracy"] <= 1
    assert metrics["rows_train"] + metrics["rows_eval"] == SPANS_2007_TO_2009
    # The UI shows the object's text as HTML whatever its name; a browser opening a file from
    # disk goes by the extension.
    shutil.copy(html, tmp_path / "report.html")
    page = open_page(tmp_path / "report.html", tmp_path / "kfp-run-report.png")
    print(f"screenshot: {page.screenshot}")
    assert problems(page) == [] and page.sections == list(render.SECTIONS)
    assert "span-20091231/penguins.csv (120 rows)" in page.text


def test_a_night_without_a_new_span_is_all_cache_hits(nights):
    result, tasks = nights["second"]
    assert result.returncode == 0, result.stdout + result.stderr
    assert [n for n, t in tasks.items() if t["status"] == "ran"] == ["CsvExampleGenDriver"]
    assert len([t for t in tasks.values() if t["status"] == "cached"]) == 13
    assert tasks["Pusher"]["artifacts"] == nights["first"][1]["Pusher"]["artifacts"]


def test_an_anomalous_new_span_is_new_work_that_the_gate_stops_before_any_push(nights):
    result, tasks = nights["third"]
    assert result.returncode == 1
    assert tasks["AnomalyGate"]["status"] == "failed"
    assert "task AnomalyGate exited with 1" in result.stderr
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in result.stderr
    assert tasks["CsvExampleGenDriver"]["parameters"]["span"] > (
        nights["second"][1]["CsvExampleGenDriver"]["parameters"]["span"])
    assert tasks["CsvExampleGen"]["status"] == "ran"  # new data, new work
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]
    assert count_examples(examples["uri"]) == 114 + 120 + 120  # 2008, 2009, the new span
    assert tasks["Pusher"]["status"] == "not run"
    assert tasks["RunReport"]["status"] == "not run"
    assert tree_digest(nights["serving"]) == nights["before_third"]


def test_without_our_entrypoint_the_spec_dies_at_statistics_gen_as_on_the_backend(compiled,
                                                                                   image):
    """Negative control: TFX's own entrypoint cannot parse an input artifact whose type the
    driver read back from MLMD as an empty schema (metadata/client.go)."""
    folder, _, spec = compiled
    pipeline_spec = yaml.safe_load(spec.read_text())
    no_fix = folder / "no_fix.yaml"
    no_fix.write_text(yaml.safe_dump(without_entrypoint(pipeline_spec)))
    result, tasks = conformance(no_fix, "--image", str(image), "--until", "StatisticsGen",
                                root=folder / "no-fix-root")
    assert result.returncode == 1
    assert tasks["CsvExampleGen"]["status"] == "ran"  # no input artifact: fine
    assert tasks["StatisticsGen"]["status"] == "failed"
    assert "task StatisticsGen exited with 1" in result.stderr
    assert "AttributeError" in result.stderr


def test_an_image_without_configs_fails_where_the_spec_reads_the_schema(compiled, tmp_path):
    """A packaging gap fails: the spec reads /opt/pipeline/configs/schema.pbtxt."""
    from pipeline.kubeflow.local_image import build

    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text((REPO / "deploy/kubeflow/Dockerfile").read_text().replace(
        "COPY configs/ configs/", ""))
    gap = build(tmp_path / "image", dockerfile)
    _, _, spec = compiled
    result, _ = conformance(spec, "--image", str(gap), "--until", "ImportSchemaGen",
                                root=tmp_path / "root")
    assert result.returncode == 1
    assert "/opt/pipeline/configs/schema.pbtxt" in result.stderr


def test_a_run_without_a_root_gets_kfps_minio_default_and_fails_clearly(compiled, tmp_path):
    """No runtime root and no kfp-launcher ConfigMap: the backend's default, minio://, which
    the spec's own defaultPipelineRoot does not change (driver.go, config/env.go)."""
    _, _, spec = compiled
    # No object store for the runner either (a developer's own AWS settings set aside).
    no_store = {"S3_ENDPOINT": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    result, _ = conformance(spec, "--state", str(tmp_path / "state"), env=no_store)
    assert result.returncode == 1
    assert "pipeline root minio://mlpipeline/v2/artifacts" in result.stdout
    assert "cannot open the bucket of minio://mlpipeline/v2/artifacts" in result.stderr


@pytest.fixture(scope="module")
def vertex_spec(tmp_path_factory):
    """The spec as TFX compiles it (for Vertex), without pipeline.kubeflow's adaptation."""
    from tfx.orchestration.kubeflow.v2.kubeflow_v2_dag_runner import (
        KubeflowV2DagRunner,
        KubeflowV2DagRunnerConfig,
    )

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


def test_without_its_driver_task_example_gen_finds_no_span_on_open_source_kfp(vertex_spec, image):
    """Why pipeline.kubeflow moves the driver out of lifecycle.preCacheCheck."""
    path, folder = vertex_spec
    result, _ = conformance(path, "--image", str(image), "--until", "CsvExampleGen",
                                root=folder / "oss-root")
    assert result.returncode == 1
    assert "lifecycle.preCacheCheck ignored" in result.stdout
    assert "DataError: no data files match" in result.stderr
