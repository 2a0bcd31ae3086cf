"""MinIO/S3 end to end: the compiled spec with its pipeline root, input data and serving dir all
on s3://, run through the conformance runner (pipeline.kubeflow.conformance, KFP 2.3.0's driver
and launcher) against a real S3-protocol server on loopback (moto, tests/s3_server.py).

The steps get the object store as on a cluster: the endpoint and region from the spec's container
env, the credentials from the Secret the compiled PlatformSpec names (KFP's own
`mlpipeline-minio-artifact`, given to the runner as a Kubernetes Secret). Nothing here opens
s3:// through tensorflow-io in the pytest process (it would abort at exit): the test reads the
bucket with boto3.

Nights: the first validates, trains, evaluates and pushes a SavedModel into the bucket; an
unchanged second night is all cache hits but the never-cached span driver; a new span in the
bucket is new work for ExampleGen (run up to it only: the rest of a new night is what
test_conformance_run.py covers on a local root).
"""
from __future__ import annotations

import json
import re
import time

import pytest
import yaml

from tests.helpers import REPO, run_cli, write_config
from tests.s3_server import ACCESS_KEY, SECRET_KEY, s3  # noqa: F401  (fixture)

pytestmark = pytest.mark.e2e
ROOT, DATA, SERVING = "tfx", "data/penguins", "serving"
SECRET = "mlpipeline-minio-artifact"


def conformance(s3, spec, state, *args):  # noqa: F811
    """A run of the runner, its record and its wall time. The runner's own env holds what the
    launcher gets from its kfp-launcher config: the S3 endpoint and credentials."""
    start = time.monotonic()
    result = run_cli("pipeline.kubeflow.conformance", str(spec), "--pipeline-root",
                     f"s3://{s3.bucket}/{ROOT}", "--state", str(state), *args, timeout=3000,
                     env=s3.env)
    seconds = time.monotonic() - start
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    record = json.loads(open(found.group(1)).read())["tasks"] if found else None
    return result, record, seconds


@pytest.fixture(scope="module")
def nights(s3, step_image, tmp_path_factory):  # noqa: F811
    folder = tmp_path_factory.mktemp("s3_night")
    image = step_image  # the session's emulated image (tests/conftest.py)
    s3.upload_tree(REPO / "data" / "penguins", DATA)
    bucket = f"s3://{s3.bucket}"
    config = write_config(folder, {
        "kubeflow.output_dir": str(folder / "spec"), "kubeflow.image": "tfx-pipeline-template:test",
        "kubeflow.pipeline_root": f"{bucket}/{ROOT}", "kubeflow.input_base": f"{bucket}/{DATA}",
        "kubeflow.serving_dir": f"{bucket}/{SERVING}", "kubeflow.schema_file": None,
        "kubeflow.endpoint": None, "kubeflow.object_store.endpoint": s3.endpoint})
    compiled = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    spec = folder / "spec" / "penguins.yaml"
    secrets = folder / "secrets.yaml"
    secrets.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET},
        "stringData": {"accesskey": ACCESS_KEY, "secretkey": SECRET_KEY}}))
    args = ("--image", str(image), "--secrets", str(secrets))
    first = conformance(s3, spec, folder / "state", *args)
    serving_after_first = s3.keys(f"{SERVING}/")
    second = conformance(s3, spec, folder / "state", *args)
    serving_after_second = s3.keys(f"{SERVING}/")
    new_span = REPO / "data" / "penguins" / "span-20091231" / "penguins.csv"
    s3.client.upload_file(str(new_span), s3.bucket, f"{DATA}/span-20101231/penguins.csv")
    third = conformance(s3, spec, folder / "state", *args, "--until", "CsvExampleGen")
    times = {"first (cold)": round(first[2]), "second (unchanged)": round(second[2]),
             "third (new span, up to CsvExampleGen)": round(third[2])}
    print(f"\ns3:// nights, wall seconds: {times}")
    return {"spec": spec, "first": first, "second": second, "third": third,
            "serving_after_first": serving_after_first,
            "serving_after_second": serving_after_second}


def test_the_spec_names_the_secret_never_its_values(nights):
    text = nights["spec"].read_text()
    assert SECRET in text
    assert ACCESS_KEY not in text and SECRET_KEY not in text


def test_first_night_on_s3_validates_trains_evaluates_and_pushes_into_the_bucket(s3, nights):  # noqa: F811,E501
    result, tasks, _ = nights["first"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert {t["status"] for t in tasks.values()} == {"ran"} and len(tasks) == 14
    for task in tasks.values():
        for artifact in task["artifacts"].values():
            assert artifact["uri"].startswith(f"s3://{s3.bucket}/{ROOT}/penguins/"), artifact
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]["uri"]
    prefix = examples.split(f"s3://{s3.bucket}/", 1)[1]
    splits = {k.split("/")[-2] for k in s3.keys(prefix + "/") if k.endswith(".gz")}
    assert splits == {"Split-train", "Split-eval"}
    # Nothing served yet: the empty serving dir in the bucket reads as no baseline.
    assert tasks["ServingBaseline"]["artifacts"]["baseline"]["metadata"]["has_baseline"] == 0
    assert tasks["Evaluator"]["artifacts"]["blessing"]["metadata"]["blessed"] == 1
    pushed = tasks["Pusher"]["artifacts"]["pushed_model"]["metadata"]
    assert pushed["pushed"] == 1
    version = pushed["pushed_version"]
    keys = set(nights["serving_after_first"])
    model = f"{SERVING}/penguins/{version}"
    assert {f"{model}/saved_model.pb", f"{model}/variables/variables.index"} <= keys
    assert {k.split("/")[2] for k in keys} == {version}
    size = s3.client.head_object(Bucket=s3.bucket, Key=f"{model}/saved_model.pb")
    assert size["ContentLength"] > 0
    # Kubeflow steps leave no folder marker objects: KFP's launcher would download one as a file.
    assert [k for k in s3.keys() if k.endswith("/")] == []


def test_an_unchanged_night_on_s3_is_all_cache_hits(nights):
    result, tasks, _ = nights["second"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert [n for n, t in tasks.items() if t["status"] == "ran"] == ["CsvExampleGenDriver"]
    assert len([t for t in tasks.values() if t["status"] == "cached"]) == 13
    assert tasks["Pusher"]["artifacts"] == nights["first"][1]["Pusher"]["artifacts"]
    assert nights["serving_after_second"] == nights["serving_after_first"]


def test_a_new_span_in_the_bucket_is_new_work(nights):
    result, tasks, _ = nights["third"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    span = tasks["CsvExampleGenDriver"]["parameters"]["span"]
    assert span > nights["second"][1]["CsvExampleGenDriver"]["parameters"]["span"]
    assert tasks["CsvExampleGen"]["status"] == "ran"
    assert (tasks["CsvExampleGen"]["artifacts"]["examples"]["uri"]
            != nights["first"][1]["CsvExampleGen"]["artifacts"]["examples"]["uri"])


def test_the_report_is_in_the_bucket_as_the_kfp_ui_reads_it(s3, nights, tmp_path):  # noqa: F811
    """The RunReport step's outputs as the UI finds them on a cluster: recorded with the system.*
    types its viewers list (MetricsVisualizations.tsx, KFP 2.3.0) and a display_name; the HTML
    and Markdown as objects AT their URIs (the UI reads that object); the headline metrics as
    the Metrics artifact's numbers. The HTML also passes the browser check."""
    from pipeline.report import render
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
    assert metrics["rows_train"] + metrics["rows_eval"] == 110 + 114 + 120
    html = tmp_path / "report.html"  # a browser opening a file goes by its extension
    html.write_bytes(read(report["html"]["uri"]))
    page = open_page(html, tmp_path / "kfp-s3-run-report.png")
    print(f"screenshot: {page.screenshot}")
    assert problems(page) == [] and page.sections == list(render.SECTIONS)
    assert "span-20091231/penguins.csv (120 rows)" in page.text
