"""The compiled spec's nights, as a cluster runs them: pipeline root, input data and serving dir
all on s3://, each task run through the local KFP backend (devtools/kfp_backend: the driver and
launcher of open-source KFP 2.17.0, the newest emulated, and of 2.4.1, the oldest) from the image
emulated from deploy/kubeflow/Dockerfile, against a real S3-protocol server on loopback (moto,
tests/s3_server.py).

The steps get the object store as on a cluster: the endpoint and region from the spec's container
env, the credentials from the Secret the compiled PlatformSpec names (KFP's own
`mlpipeline-minio-artifact`, given to the runner as a Kubernetes Secret). Nothing here opens
s3:// through tensorflow-io in the pytest process (it would abort at exit): the test reads the
bucket with boto3.

Seven nights (one set for the whole suite: a first night costs a minute or two, the others less):
- on each release, a first night validates, trains, evaluates against the model that serves now
  (the session's pushed model, seeded into that release's serving dir in the bucket) and pushes a
  second version into the bucket, its artifacts at <root>/<pipeline>/<run id>/<task>/<uuid>/<key>
  (from 2.5.0 with each step's executor-logs beside them);
- on each release, a night whose config adds a threshold no model meets: the Evaluator (and what
  follows it) runs again, refuses the candidate, and the run report in the bucket says "not
  blessed" in the HTML, the Markdown and the Metrics artifact; nothing is pushed;
- on 2.17.0, a night started while another run holds the run lease (core/run_lease.py)
  stops at its first step, naming the holder, and pushes nothing; every other night takes the
  lease and gives it back (its run report, or its failed step);
- on 2.17.0, an unchanged night is all cache hits but the never-cached span driver and run
  report;
- on 2.17.0, a night whose new span is anomalous is new work that the gate stops: the Pusher never
  runs and the serving dir in the bucket is unchanged; its exit step still runs, writes the
  report naming the failed step and posts one message to a webhook on loopback, whose URL the
  2.17.0 spec takes from a Kubernetes Secret (notify.kubeflow_secret).
The negative controls (no entrypoint, no configs/ in the image, no root) are in
test_conformance_run.py.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from core import run_lease
from tests.helpers import (add_anomalous_span, copy_spans, dump_yaml, example_config, example_data,
                           run_cli, span_files, write_config)
from tests.pipeline.test_notify import loopback_webhook
from tests.s3_server import ACCESS_KEY, SECRET_KEY, s3  # noqa: F401  (fixture)

# Three nights of step processes in the first test's setup: more than the suite's 1200 s per test on
# a busy 2-core machine. Each conformance run still has its own timeout (run_cli).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]
DATA = "data/spans"
NEWEST, OLDEST = "2.17.0", "2.4.1"
# Each release's nights: their own pipeline root, serving dir and compiled spec.
ROOT = {NEWEST: "tfx", OLDEST: f"tfx-{OLDEST}"}
SERVING = {NEWEST: "serving", OLDEST: f"serving-{OLDEST}"}
UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
SECRET = "mlpipeline-minio-artifact"
# The Secret holding the webhook URL of the 2.17.0 nights' exit step (notify.kubeflow_secret).
WEBHOOK_SECRET = "night-webhook"
NAME, MODEL = example_config().pipeline_name, example_config().serving.model_name
# The bundled spans' files, newest last; the window of 3 the first night trains with.
SPAN_FILES = [f for span in sorted(example_data().iterdir()) for f in span_files(span)]
NEWEST_FILE = SPAN_FILES[-1]
WINDOW_ROWS = sum(len(f.read_text().splitlines()) - 1
                  for f in SPAN_FILES[-example_config().data.span_window:])


# The run that holds the lease when the overlapping night starts.
OTHER_RUN = "0f0f0f0f-0000-4000-8000-00000000a11a"

# The threshold the refusing nights add: more eval examples than the bundled data holds (TFMA
# names the metric example_count).
UNMET, UNMET_KEY, UNMET_BOUND = "ExampleCount", "example_count", 1_000_000


def compile_spec(folder: Path, changes: dict) -> Path:
    """The spec `--runner kubeflow` compiles for the bundled config with changes, in folder."""
    config = write_config(folder, {**changes, "kubeflow.output_dir": str(folder / "spec")})
    compiled = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    return folder / "spec" / f"{NAME}.yaml"


def conformance(s3, tag, spec, state, *args):  # noqa: F811
    """A run of the runner on release tag: its output, its record's tasks, its wall time and
    its run id. The launcher opens the bucket as on a cluster: with the kfp-launcher ConfigMap's
    providers.s3 (--launcher-config in args) and the Secret it names (--secrets). The steps
    fork one interpreter that imported the image's libraries (--prefork-socket in args: the
    nights share it; ~11 s of CPU less per step;
    test_conformance.py checks that a forked step sees the pod a fresh one sees, and
    test_conformance_run.py's runs start each step fresh)."""
    start = time.monotonic()
    result = run_cli("devtools.kfp_backend", str(spec), "--backend-version", tag,
                     "--pipeline-root", f"s3://{s3.bucket}/{ROOT[tag]}", "--state", str(state),
                     *args, timeout=3000)
    seconds = time.monotonic() - start
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    record = json.loads(open(found.group(1)).read()) if found else {}
    return result, record.get("tasks"), seconds, record.get("run_id")


def lease_key(tag: str) -> str:
    """The run lease of the release's nights (core/run_lease.py), beside their runs."""
    return f"{ROOT[tag]}/{NAME}/{run_lease.LEASE_NAME}"


def lease_object(s3, tag: str) -> dict:  # noqa: F811
    return json.loads(s3.client.get_object(Bucket=s3.bucket, Key=lease_key(tag))["Body"].read())


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
    with step_server(json.loads((image / "image.json").read_text()), folder / "prefork") as steps, \
            loopback_webhook() as webhook:
        return _nights(s3, image, pushed_run, folder, steps, webhook)


def _nights(s3, image, pushed_run, folder, steps, webhook):  # noqa: F811
    s3.upload_tree(example_data(), DATA)
    # What serves now: the session's locally pushed model, so each first night has a baseline.
    seeded = pushed_run.version_dir.name
    bucket = f"s3://{s3.bucket}"
    url, handler = webhook
    secrets = folder / "secrets.yaml"
    secrets.write_text(dump_yaml({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET},
         "stringData": {"accesskey": ACCESS_KEY, "secretkey": SECRET_KEY}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET},
         "stringData": {"url": url}}]}))
    # deploy/kubeflow/README.md's kfp-launcher: providers.s3 at the store, its Secret.
    launcher = folder / "kfp-launcher.yaml"
    launcher.write_text(dump_yaml(s3.launcher_config(SECRET)))
    specs, refusing = {}, {}
    for tag in (OLDEST, NEWEST):
        s3.upload_tree(pushed_run.version_dir, f"{SERVING[tag]}/{MODEL}/{seeded}")
        kubeflow = {
            # The release the spec is for: 2.4.1's compiler takes no exit step's final status.
            "kubeflow.backend_version": tag,
            "kubeflow.image": "tfx-pipeline-template:test",
            "kubeflow.pipeline_root": f"{bucket}/{ROOT[tag]}",
            "kubeflow.input_base": f"{bucket}/{DATA}",
            "kubeflow.serving_dir": f"{bucket}/{SERVING[tag]}", "kubeflow.schema_file": None,
            "kubeflow.endpoint": None, "kubeflow.object_store.endpoint": s3.endpoint}
        # The newest release's nights tell someone when they fail (2.4.1's compiler takes no
        # exit step's final status).
        specs[tag] = compile_spec(folder / tag, {
            **kubeflow, **({"notify.kubeflow_secret": WEBHOOK_SECRET} if tag == NEWEST else {})})
        refusing[tag] = compile_spec(folder / tag / "refusing", {
            **kubeflow, f"evaluation.thresholds.{UNMET}": {"lower_bound": UNMET_BOUND}})
    steps.wait_ready(timeout=600)
    args = ("--image", str(image), "--secrets", str(secrets), "--launcher-config", str(launcher),
            "--prefork-socket", steps.socket_path)

    # After each night, the bucket's folder-marker keys (`<prefix>/`): KFP's launcher downloads
    # one as a file (core/storage.py). One listing of the bucket a night.
    markers = {OLDEST: {}, NEWEST: {}}
    # What each night's exit step posted to the webhook.
    messages = {OLDEST: {}, NEWEST: {}}

    def night(tag, name, spec=None):
        posted = len(handler.received)
        run = conformance(s3, tag, spec or specs[tag], folder / tag / "state", *args)
        markers[tag][name] = [k for k in s3.keys() if k.endswith("/")]
        messages[tag][name] = handler.received[posted:]
        return run

    nights = {OLDEST: {"first": night(OLDEST, "first")}, NEWEST: {"first": night(NEWEST, "first")}}
    for tag in nights:
        nights[tag]["serving_after_first"] = s3.keys(f"{SERVING[tag]}/")
        nights[tag]["lease_after_first"] = lease_object(s3, tag)
    newest = nights[NEWEST]
    # A night started while another run holds the lease (a manual run during the nightly one).
    released = s3.client.get_object(Bucket=s3.bucket, Key=lease_key(NEWEST))["Body"].read()
    s3.client.put_object(Bucket=s3.bucket, Key=lease_key(NEWEST), Body=run_lease.Lease(
        OTHER_RUN, f"{bucket}/{ROOT[NEWEST]}/{NAME}/{OTHER_RUN}", time.time(),
        time.time() + 3600).to_bytes())
    newest["overlapping"] = night(NEWEST, "overlapping")
    newest["serving_after_overlapping"] = s3.keys(f"{SERVING[NEWEST]}/")
    newest["lease_after_overlapping"] = lease_object(s3, NEWEST)
    s3.client.put_object(Bucket=s3.bucket, Key=lease_key(NEWEST), Body=released)
    newest["second"] = night(NEWEST, "second")
    newest["serving_after_second"] = s3.keys(f"{SERVING[NEWEST]}/")
    for tag in nights:
        nights[tag]["refused"] = night(tag, "refused", refusing[tag])
        nights[tag]["serving_after_refused"] = s3.keys(f"{SERVING[tag]}/")
    anomalous = add_anomalous_span(copy_spans(folder), "span-20101231")
    s3.client.upload_file(str(anomalous), s3.bucket,
                          f"{DATA}/span-20101231/{anomalous.name}")
    newest["third"] = night(NEWEST, "third")
    newest["serving_after_third"] = s3.keys(f"{SERVING[NEWEST]}/")
    newest["lease_after_third"] = lease_object(s3, NEWEST)
    times = {f"{tag} {name}": round(run[2]) for tag, runs in nights.items()
             for name, run in runs.items()
             if name in ("first", "overlapping", "second", "refused", "third")}
    print(f"\ns3:// nights, wall seconds: {times}")
    for tag, runs in nights.items():
        runs.update(spec=specs[tag], seeded=seeded, folder=folder, markers=markers[tag],
                    messages=messages[tag], webhook_url=url)
    return nights


def test_the_spec_names_the_secret_never_its_values(nights):
    text = nights[NEWEST]["spec"].read_text()
    assert SECRET in text
    assert ACCESS_KEY not in text and SECRET_KEY not in text


def object_text(s3, uri: str) -> str:  # noqa: F811
    key = uri.split(f"s3://{s3.bucket}/", 1)[1]
    return s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read().decode()


@pytest.mark.parametrize("tag", [NEWEST, OLDEST])
def test_first_night_validates_trains_evaluates_against_what_serves_and_pushes_into_the_bucket(
        s3, nights, tag):  # noqa: F811
    night = nights[tag]
    result, tasks, _, run_id = night["first"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert f"as open-source KFP {tag} would" in result.stdout
    # The 16 steps (the skew check and gate since issue 45) and the exit step after them
    # (pipeline/kubeflow/client/exit_handler.py).
    assert {t["status"] for t in tasks.values()} == {"ran"} and len(tasks) == 17
    # Every artifact at <root>/<pipeline>/<run id>/<task>/<uuid>/<key> (driver/driver.go
    # provisionOutputs), each task's under one uuid; from 2.5.0 each task's executor-logs
    # beside them (-0: the first attempt, 2.16.1+), the step's output as the launcher teed it.
    for name, task in tasks.items():
        uris = {key: artifact["uri"] for key, artifact in task["artifacts"].items()}
        assert ("executor-logs" in uris) == (tag == NEWEST), name
        roots = {uri.rsplit("/", 1)[0] for uri in uris.values()}
        assert len(roots) <= 1, uris  # one task root per execution
        for root in roots:
            assert re.fullmatch(f"s3://{s3.bucket}/{ROOT[tag]}/{NAME}/{run_id}/{name}/{UUID}",
                                root), root
        for key, uri in uris.items():
            assert uri.endswith(f"/{key}-0" if key == "executor-logs" else f"/{key}"), uri
        if tag == NEWEST:
            assert task["artifacts"]["executor-logs"]["type"] == "system.Artifact"
            assert object_text(s3, uris["executor-logs"]).strip(), name
    if tag == NEWEST:
        assert "Starting executor" in object_text(
            s3, tasks["StatisticsGen"]["artifacts"]["executor-logs"]["uri"])
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]["uri"]
    prefix = examples.split(f"s3://{s3.bucket}/", 1)[1]
    splits = {k.split("/")[-2] for k in s3.keys(prefix + "/") if k.endswith(".gz")}
    assert splits == {"Split-train", "Split-eval"}
    # The window of 3 spans.
    assert count_examples(s3, examples, night["folder"] / tag / "first") == WINDOW_ROWS
    baseline = tasks["ServingBaseline"]["artifacts"]["baseline"]
    assert baseline["metadata"]["has_baseline"] == 1
    assert baseline["metadata"]["serving_version"] == night["seeded"]
    blessing = tasks["Evaluator"]["artifacts"]["blessing"]["metadata"]
    assert blessing["blessed"] == 1 and blessing["baseline_model"] == baseline["uri"]
    pushed = tasks["Pusher"]["artifacts"]["pushed_model"]["metadata"]
    assert pushed["pushed"] == 1
    version = pushed["pushed_version"]
    keys = set(night["serving_after_first"])
    model = f"{SERVING[tag]}/{MODEL}/{version}"
    assert {f"{model}/saved_model.pb", f"{model}/variables/variables.index"} <= keys
    assert {k.split("/")[2] for k in keys} == {night["seeded"], version}
    size = s3.client.head_object(Bucket=s3.bucket, Key=f"{model}/saved_model.pb")
    assert size["ContentLength"] > 0
    # Kubeflow steps leave no folder marker objects: KFP's launcher would download one as a file.
    assert [k for k in s3.keys() if k.endswith("/")] == []


def test_no_night_leaves_a_folder_marker_object(nights):
    """After every night, on each release, no key in the bucket ends with `/`: the steps make
    folders only through core/storage.py makedirs (none on s3://), and TFX's Pusher copy makes
    each folder before any object is under it."""
    assert {tag: nights[tag]["markers"] for tag in (NEWEST, OLDEST)} == {
        NEWEST: {"first": [], "overlapping": [], "second": [], "refused": [], "third": []},
        OLDEST: {"first": [], "refused": []}}


def test_an_unchanged_night_is_all_cache_hits(nights):
    night = nights[NEWEST]
    result, tasks, _, _ = night["second"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    # And the run report, never cached: it releases the run lease (core/run_lease.py); the
    # exit step is never cached either: each night's outcome is its own; nor is the skew check
    # (requests arrive whether the data changed or not), so its gate reads a new result.
    assert [n for n, t in tasks.items() if t["status"] == "ran"] == [
        "CsvExampleGenDriver", "SkewCheck", "SkewGate", "RunReport", "RunExit"]
    assert len([t for t in tasks.values() if t["status"] == "cached"]) == 12
    # The cached execution's artifacts, executor-logs included (driver/cache.go).
    assert tasks["Pusher"]["artifacts"] == night["first"][1]["Pusher"]["artifacts"]
    assert night["serving_after_second"] == night["serving_after_first"]


@pytest.mark.parametrize("tag", [NEWEST, OLDEST])
def test_each_night_takes_the_lease_and_gives_it_back(nights, tag):
    """The driver task took it for the night's run, the run report released it (2.4.1 too: the
    run is known by its outputs' run root, no placeholder needed)."""
    night = nights[tag]
    lease = night["lease_after_first"]
    assert lease["run_id"] == night["first"][3] and lease["released_at"] is not None
    assert lease["released_at"] > lease["taken_at"]


def test_a_night_that_overlaps_another_run_stops_at_its_first_step(nights):
    night = nights[NEWEST]
    result, tasks, _, run_id = night["overlapping"]
    assert result.returncode == 1
    assert tasks["CsvExampleGenDriver"]["status"] == "failed"
    assert (f"error: another run of this pipeline is in progress: run {OTHER_RUN} (taken"
            in result.stderr)
    assert f"this run ({run_id}) stops at its first step and pushes nothing" in result.stderr
    assert tasks["Pusher"]["status"] == "not run"
    assert night["serving_after_overlapping"] == night["serving_after_first"]
    held = night["lease_after_overlapping"]
    assert held["run_id"] == OTHER_RUN and held["released_at"] is None, "not its to release"


def test_a_failed_night_gives_the_lease_back(nights):
    """The anomaly gate's failure released it (run_lease_step.after): the next night need
    not wait for the expiry."""
    night = nights[NEWEST]
    lease = night["lease_after_third"]
    assert lease["run_id"] == night["third"][3] and lease["released_at"] is not None


def test_an_anomalous_new_span_is_new_work_that_the_gate_stops_before_any_push(s3, nights):  # noqa: F811,E501
    night = nights[NEWEST]
    result, tasks, _, _ = night["third"]
    assert result.returncode == 1
    assert tasks["AnomalyGate"]["status"] == "failed"
    assert "task AnomalyGate exited with 1" in result.stderr
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in result.stderr
    # The failed step's log is still in the bucket (2.16.0+: launcher_v2.go executeV2).
    logs = tasks["AnomalyGate"]["artifacts"]["executor-logs"]["uri"]
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in object_text(s3, logs)
    assert tasks["CsvExampleGenDriver"]["parameters"]["span"] > (
        night["second"][1]["CsvExampleGenDriver"]["parameters"]["span"])
    assert tasks["CsvExampleGen"]["status"] == "ran"  # new data, new work
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]["uri"]
    assert examples != night["first"][1]["CsvExampleGen"]["artifacts"]["examples"]["uri"]
    # The two newest bundled spans and the new span (a copy of the newest's rows).
    newest_two = [len(f.read_text().splitlines()) - 1 for f in SPAN_FILES[-2:]]
    assert count_examples(s3, examples, night["folder"] / "third") == sum(newest_two) + \
        newest_two[-1]
    assert tasks["Pusher"]["status"] == "not run"
    assert tasks["RunReport"]["status"] == "not run"
    assert tasks["RunExit"]["status"] == "ran"  # whatever the outcome
    assert night["serving_after_third"] == night["serving_after_first"]


def test_the_gates_failure_ends_with_a_report_naming_the_step_and_one_message(s3, nights):  # noqa: F811,E501
    """The anomalous night's exit step (exit_handler.py, run_exit.py): the report says which
    step failed and why, read from what the steps that ran recorded, and one message reaches the
    webhook whose URL only the Secret holds."""
    night = nights[NEWEST]
    _, tasks, _, run_id = night["third"]
    assert night["webhook_url"] not in night["spec"].read_text()
    assert tasks["RunExit"]["status"] == "ran", tasks["RunExit"]
    markdown = object_text(s3, tasks["RunExit"]["artifacts"]["markdown"]["uri"])
    assert "the run stopped at AnomalyGate" in markdown
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in markdown
    # The anomalous span CsvExampleGen read, where it is (s3://): the config's Path folded the
    # URL to s3:/ in the exit step, and the report listed no span (found by this test).
    assert f"- span 2010-12-31: `s3://{s3.bucket}/{DATA}/span-20101231/" in markdown, markdown
    assert re.search(r"Anomalies: 2: \S+ ENUM_TYPE_UNEXPECTED_STRING_VALUES", markdown)
    assert "<html" in object_text(s3, tasks["RunExit"]["artifacts"]["html"]["uri"])
    [(_, content_type, body)] = night["messages"]["third"]
    assert content_type == "application/json"
    text = json.loads(body)["text"]
    assert text.splitlines()[0] == (f"Pipeline '{NAME}' on Kubeflow: nightly run failed at "
                                    "AnomalyGate")
    assert f"run: Kubeflow run {run_id}" in text
    assert "ENUM_TYPE_UNEXPECTED_STRING_VALUES" in text
    # A night that completed posted nothing.
    assert night["messages"]["first"] == night["messages"]["second"] == []


def test_the_report_is_in_the_bucket_as_the_kfp_ui_reads_it(s3, nights, tmp_path):  # noqa: F811
    """The RunReport step's outputs as the UI finds them on a cluster: recorded with the system.*
    types its viewers list (MetricsVisualizations.tsx, KFP 2.3.0) and a display_name; the HTML
    and Markdown as objects AT their URIs (the UI reads that object); the headline metrics as
    the Metrics artifact's numbers. The HTML also passes the browser check."""
    from components.run_report import render
    from tests.browser import open_page
    from tests.pipeline.test_report_browser import problems

    _, tasks, _, _ = nights[NEWEST]["first"]
    report = tasks["RunReport"]["artifacts"]
    assert {k: a["type"] for k, a in report.items()} == {
        "html": "system.HTML", "markdown": "system.Markdown", "metrics": "system.Metrics",
        "executor-logs": "system.Artifact"}  # the launcher's, from 2.5.0
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
    rows = len(NEWEST_FILE.read_text().splitlines()) - 1
    assert f"{NEWEST_FILE.parent.name}/{NEWEST_FILE.name} ({rows} rows)" in page.text


@pytest.mark.parametrize("tag", [NEWEST, OLDEST])
def test_a_refused_night_says_not_blessed_in_every_report_output_and_pushes_nothing(
        s3, nights, tag):  # noqa: F811
    """On each release: the RunReport step reads the Evaluator's blessing as the backend hands
    it on (struct-wrapped custom properties), so a refused candidate is "not blessed" in the HTML,
    the Markdown and the Metrics artifact (components/run_report/mlmd.py)."""
    night = nights[tag]
    result, tasks, _, _ = night["refused"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    ran = {name for name, task in tasks.items() if task["status"] == "ran"}
    assert {"Evaluator", "Pusher", "RunReport"} <= ran and "Trainer" not in ran  # only what moved
    blessing = tasks["Evaluator"]["artifacts"]["blessing"]["metadata"]
    assert blessing["blessed"] == 0
    assert tasks["Pusher"]["artifacts"]["pushed_model"]["metadata"]["pushed"] == 0
    assert night["serving_after_refused"] == night["serving_after_first"]
    report = tasks["RunReport"]["artifacts"]
    refusal = f"{UNMET_KEY} on Overall = "
    bound = f"below the lower bound {UNMET_BOUND:g}"
    # ServingBaseline came from the cache (same candidate): its version is the one that served
    # when the first night evaluated, as on a cluster.
    serving = tasks["ServingBaseline"]["artifacts"]["baseline"]["metadata"]["serving_version"]
    assert serving == night["seeded"]
    for key in ("html", "markdown"):
        text = object_text(s3, report[key]["uri"])
        assert "Not blessed: 1 threshold(s) failed (" in text, key
        assert refusal in text and bound in text, key
        assert f"version {serving} keeps serving" in text, key
        assert "threshold {" not in text and "__value__" not in text, key  # no proto text
    metrics = report["metrics"]["metadata"]
    assert metrics["blessed"] == 0 and metrics["pushed"] == 0
