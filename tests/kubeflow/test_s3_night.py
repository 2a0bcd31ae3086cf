"""The compiled spec's nights, as a cluster runs them: pipeline root, input data and serving dir
all on s3://, each task run through the conformance runner (devtools.kfp_backend: KFP
2.3.0's driver and launcher) from the image emulated from deploy/kubeflow/Dockerfile, against a
real S3-protocol server on loopback (moto, tests/s3_server.py).

The steps get the object store as on a cluster: the endpoint and region from the spec's container
env, the credentials from the Secret the compiled PlatformSpec names (KFP's own
`mlpipeline-minio-artifact`, given to the runner as a Kubernetes Secret). Nothing here opens
s3:// through tensorflow-io in the pytest process (it would abort at exit): the test reads the
bucket with boto3.

Three nights on one root (one set for the whole suite: each night costs minutes):
- the first validates, trains, evaluates against the model that serves now (the session's pushed
  model, seeded into the bucket's serving dir) and pushes a second version into the bucket;
- an unchanged night is all cache hits but the never-cached span driver;
- a night whose new span is anomalous is new work that the gate stops: the Pusher never runs and
  the serving dir in the bucket is unchanged.
The negative controls (no entrypoint, no configs/ in the image, no root) are in
test_conformance_run.py.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import (add_anomalous_span, copy_spans, example_config, example_data,
                           run_cli, span_files, write_config)
from tests.s3_server import ACCESS_KEY, SECRET_KEY, s3  # noqa: F401  (fixture)

# Three nights of step processes in the first test's setup: more than the suite's 1200 s per test on
# a busy 2-core machine. Each conformance run still has its own timeout (run_cli).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]
ROOT, DATA, SERVING = "tfx", "data/spans", "serving"
SECRET = "mlpipeline-minio-artifact"
NAME, MODEL = example_config().pipeline_name, example_config().serving.model_name
# The bundled spans' files, newest last; the window of 3 the first night trains with.
SPAN_FILES = [f for span in sorted(example_data().iterdir()) for f in span_files(span)]
NEWEST = SPAN_FILES[-1]
WINDOW_ROWS = sum(len(f.read_text().splitlines()) - 1
                  for f in SPAN_FILES[-example_config().data.span_window:])


def conformance(s3, spec, state, *args):  # noqa: F811
    """A run of the runner, its record and its wall time. The runner's own env holds what the
    launcher gets from its kfp-launcher config: the S3 endpoint and credentials. The steps fork
    one interpreter that imported the image's libraries (--prefork-socket in args: the nights
    share it; ~11 s of CPU less per step; test_conformance.py checks that a forked step sees the
    pod a fresh one sees, and test_conformance_run.py's runs start each step fresh)."""
    start = time.monotonic()
    result = run_cli("devtools.kfp_backend", str(spec), "--pipeline-root",
                     f"s3://{s3.bucket}/{ROOT}", "--state", str(state), *args,
                     timeout=3000, env=s3.env)
    seconds = time.monotonic() - start
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    record = json.loads(open(found.group(1)).read())["tasks"] if found else None
    return result, record, seconds


def count_examples(s3, uri: str, folder: Path) -> int:  # noqa: F811
    """tf.Examples under an s3:// Examples artifact, read from a local copy (boto3)."""
    import tensorflow as tf

    prefix = uri.split(f"s3://{s3.bucket}/", 1)[1] + "/"
    files = []
    for key in s3.keys(prefix):
        if key.endswith(".gz"):
            local = folder / key
            local.parent.mkdir(parents=True, exist_ok=True)
            s3.client.download_file(s3.bucket, key, str(local))
            files.append(str(local))
    return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))


@pytest.fixture(scope="module")
def nights(s3, step_image, pushed_run, tmp_path_factory):  # noqa: F811
    from devtools.kfp_backend import step_server

    folder = tmp_path_factory.mktemp("s3_night")
    image = step_image  # the session's emulated image (tests/conftest.py)
    # The nights' one step server: it imports the image's libraries while the rest is set up.
    with step_server(json.loads((image / "image.json").read_text()), folder / "prefork") as steps:
        return _three_nights(s3, image, pushed_run, folder, steps)


def _three_nights(s3, image, pushed_run, folder, steps):  # noqa: F811
    s3.upload_tree(example_data(), DATA)
    # What serves now: the session's locally pushed model, so the first night has a baseline.
    seeded = pushed_run.version_dir.name
    s3.upload_tree(pushed_run.version_dir, f"{SERVING}/{MODEL}/{seeded}")
    bucket = f"s3://{s3.bucket}"
    config = write_config(folder, {
        "kubeflow.output_dir": str(folder / "spec"), "kubeflow.image": "tfx-pipeline-template:test",
        "kubeflow.pipeline_root": f"{bucket}/{ROOT}", "kubeflow.input_base": f"{bucket}/{DATA}",
        "kubeflow.serving_dir": f"{bucket}/{SERVING}", "kubeflow.schema_file": None,
        "kubeflow.endpoint": None, "kubeflow.object_store.endpoint": s3.endpoint})
    compiled = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    spec = folder / "spec" / f"{NAME}.yaml"
    secrets = folder / "secrets.yaml"
    secrets.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET},
        "stringData": {"accesskey": ACCESS_KEY, "secretkey": SECRET_KEY}}))
    steps.wait_ready(timeout=600)
    args = ("--image", str(image), "--secrets", str(secrets), "--prefork-socket", steps.socket_path)
    first = conformance(s3, spec, folder / "state", *args)
    serving_after_first = s3.keys(f"{SERVING}/")
    second = conformance(s3, spec, folder / "state", *args)
    serving_after_second = s3.keys(f"{SERVING}/")
    anomalous = add_anomalous_span(copy_spans(folder), "span-20101231")
    s3.client.upload_file(str(anomalous), s3.bucket,
                          f"{DATA}/span-20101231/{anomalous.name}")
    third = conformance(s3, spec, folder / "state", *args)
    serving_after_third = s3.keys(f"{SERVING}/")
    times = {"first (cold)": round(first[2]), "second (unchanged)": round(second[2]),
             "third (anomalous new span)": round(third[2])}
    print(f"\ns3:// nights, wall seconds: {times}")
    return {"spec": spec, "first": first, "second": second, "third": third, "seeded": seeded,
            "folder": folder, "serving_after_first": serving_after_first,
            "serving_after_second": serving_after_second,
            "serving_after_third": serving_after_third}


def test_the_spec_names_the_secret_never_its_values(nights):
    text = nights["spec"].read_text()
    assert SECRET in text
    assert ACCESS_KEY not in text and SECRET_KEY not in text


def test_first_night_validates_trains_evaluates_against_what_serves_and_pushes_into_the_bucket(
        s3, nights):  # noqa: F811
    result, tasks, _ = nights["first"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert {t["status"] for t in tasks.values()} == {"ran"} and len(tasks) == 14
    for task in tasks.values():
        for artifact in task["artifacts"].values():
            assert artifact["uri"].startswith(f"s3://{s3.bucket}/{ROOT}/{NAME}/"), artifact
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]["uri"]
    prefix = examples.split(f"s3://{s3.bucket}/", 1)[1]
    splits = {k.split("/")[-2] for k in s3.keys(prefix + "/") if k.endswith(".gz")}
    assert splits == {"Split-train", "Split-eval"}
    # The window of 3 spans.
    assert count_examples(s3, examples, nights["folder"] / "first") == WINDOW_ROWS
    baseline = tasks["ServingBaseline"]["artifacts"]["baseline"]
    assert baseline["metadata"]["has_baseline"] == 1
    assert baseline["metadata"]["serving_version"] == nights["seeded"]
    blessing = tasks["Evaluator"]["artifacts"]["blessing"]["metadata"]
    assert blessing["blessed"] == 1 and blessing["baseline_model"] == baseline["uri"]
    pushed = tasks["Pusher"]["artifacts"]["pushed_model"]["metadata"]
    assert pushed["pushed"] == 1
    version = pushed["pushed_version"]
    keys = set(nights["serving_after_first"])
    model = f"{SERVING}/{MODEL}/{version}"
    assert {f"{model}/saved_model.pb", f"{model}/variables/variables.index"} <= keys
    assert {k.split("/")[2] for k in keys} == {nights["seeded"], version}
    size = s3.client.head_object(Bucket=s3.bucket, Key=f"{model}/saved_model.pb")
    assert size["ContentLength"] > 0
    # Kubeflow steps leave no folder marker objects: KFP's launcher would download one as a file.
    assert [k for k in s3.keys() if k.endswith("/")] == []


def test_an_unchanged_night_is_all_cache_hits(nights):
    result, tasks, _ = nights["second"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert [n for n, t in tasks.items() if t["status"] == "ran"] == ["CsvExampleGenDriver"]
    assert len([t for t in tasks.values() if t["status"] == "cached"]) == 13
    assert tasks["Pusher"]["artifacts"] == nights["first"][1]["Pusher"]["artifacts"]
    assert nights["serving_after_second"] == nights["serving_after_first"]


def test_an_anomalous_new_span_is_new_work_that_the_gate_stops_before_any_push(s3, nights):  # noqa: F811,E501
    result, tasks, _ = nights["third"]
    assert result.returncode == 1
    assert tasks["AnomalyGate"]["status"] == "failed"
    assert "task AnomalyGate exited with 1" in result.stderr
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in result.stderr
    assert tasks["CsvExampleGenDriver"]["parameters"]["span"] > (
        nights["second"][1]["CsvExampleGenDriver"]["parameters"]["span"])
    assert tasks["CsvExampleGen"]["status"] == "ran"  # new data, new work
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]["uri"]
    assert examples != nights["first"][1]["CsvExampleGen"]["artifacts"]["examples"]["uri"]
    # The two newest bundled spans and the new span (a copy of the newest's rows).
    newest_two = [len(f.read_text().splitlines()) - 1 for f in SPAN_FILES[-2:]]
    assert count_examples(s3, examples, nights["folder"] / "third") == sum(newest_two) + \
        newest_two[-1]
    assert tasks["Pusher"]["status"] == "not run"
    assert tasks["RunReport"]["status"] == "not run"
    assert nights["serving_after_third"] == nights["serving_after_first"]


def test_the_report_is_in_the_bucket_as_the_kfp_ui_reads_it(s3, nights, tmp_path):  # noqa: F811
    """The RunReport step's outputs as the UI finds them on a cluster: recorded with the system.*
    types its viewers list (MetricsVisualizations.tsx, KFP 2.3.0) and a display_name; the HTML
    and Markdown as objects AT their URIs (the UI reads that object); the headline metrics as
    the Metrics artifact's numbers. The HTML also passes the browser check."""
    from components.run_report import render
    from tests.browser import open_page
    from tests.pipeline.test_report_browser import problems

    _, tasks, _ = nights["first"]
    report = tasks["RunReport"]["artifacts"]
    assert {k: a["type"] for k, a in report.items()} == {
        "html": "system.HTML", "markdown": "system.Markdown", "metrics": "system.Metrics"}
    assert all(a["metadata"]["display_name"] for a in report.values())

    def read(uri: str) -> bytes:
        return s3.client.get_object(Bucket=s3.bucket, Key=uri.split(f"s3://{s3.bucket}/", 1)[1])[
            "Body"].read()

    assert "**Blessed: every threshold held" in read(report["markdown"]["uri"]).decode()
    metrics = report["metrics"]["metadata"]
    assert metrics["blessed"] == 1 and metrics["pushed"] == 1 and metrics["drifted_features"] == 0
    assert metrics["rows_train"] + metrics["rows_eval"] == WINDOW_ROWS
    html = tmp_path / "report.html"  # a browser opening a file goes by its extension
    html.write_bytes(read(report["html"]["uri"]))
    page = open_page(html, tmp_path / "kfp-s3-run-report.png")
    print(f"screenshot: {page.screenshot}")
    assert problems(page) == [] and page.sections == list(render.SECTIONS)
    rows = len(NEWEST.read_text().splitlines()) - 1
    assert f"{NEWEST.parent.name}/{NEWEST.name} ({rows} rows)" in page.text
