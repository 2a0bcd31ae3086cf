"""Publish to a KFP API server: upload a pipeline version, start a run, or replace the nightly
recurring run, each run carrying the pipeline root. The token, when the endpoint needs one, comes
from KF_PIPELINES_TOKEN."""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import io
import json
import os
import re
import secrets
import warnings
from pathlib import Path
from typing import Callable, List, Optional

from core.config import PipelineConfig
from pipeline.kubeflow import KubeflowError

from pipeline.kubeflow.client.preflight import cluster_problems

TOKEN_ENV = "KF_PIPELINES_TOKEN"
# Set to 1 to send the token over plain http to a host that is not this machine (a cluster-
# internal endpoint inside a mesh that encrypts, say): anyone on the path reads it otherwise.
INSECURE_TOKEN_ENV = "KF_PIPELINES_ALLOW_HTTP_TOKEN"
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def _token_problem(endpoint: str, token: Optional[str]) -> Optional[str]:
    """Why the bearer token must not go to `endpoint`: plain http to another host."""
    import urllib.parse

    url = urllib.parse.urlsplit(endpoint)
    if not token or url.scheme != "http" or (url.hostname or "") in _LOOPBACK \
            or (url.hostname or "").startswith("127.") or os.environ.get(INSECURE_TOKEN_ENV) == "1":
        return None
    return (f"{TOKEN_ENV} is set and {endpoint} is plain http to another host: the bearer token "
            f"would cross the network unencrypted. Use https, a port-forward to localhost, or "
            f"set {INSECURE_TOKEN_ENV}=1 if the path is encrypted otherwise")


def connect(endpoint: str, namespace: Optional[str] = None, timeout_s: float = 15):
    """A kfp.Client for endpoint, after one health check that fails fast and says why."""
    import certifi
    import urllib3

    token = os.environ.get(TOKEN_ENV)
    problem = _token_problem(endpoint, token)
    if problem:
        raise KubeflowError(problem)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = endpoint.rstrip("/") + "/apis/v2beta1/healthz"
    http = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=certifi.where())
    try:
        response = http.request("GET", url, headers=headers, timeout=timeout_s, retries=False)
    except urllib3.exceptions.HTTPError as error:
        raise KubeflowError(f"cannot reach KFP at {endpoint}: {_reason(error)}") from None
    if response.status != 200:
        raise KubeflowError(f"KFP at {endpoint} answered its health check with "
                            f"{_http_problem(response.status, response.data)}")
    try:
        multi_user = bool(json.loads(response.data or b"{}").get("multi_user"))
    except ValueError:
        raise KubeflowError(f"{endpoint} is not a KFP v2 API: its health check returned "
                            f"{response.data[:80]!r}") from None
    if multi_user and not namespace:
        raise KubeflowError(f"KFP at {endpoint} is multi-user: set kubeflow.namespace to your "
                            "profile's namespace")
    import kfp
    import kfp_server_api

    try:
        with _quiet():
            return kfp.Client(host=endpoint.rstrip("/"), existing_token=token,
                              **({"namespace": namespace} if namespace else {}))
    except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, TimeoutError) as error:
        raise KubeflowError(f"cannot open a KFP client for {endpoint}: {_reason(error)}"
                            ) from None


def _reason(error: Exception) -> str:
    """urllib3's reason without the connection object's repr."""
    return re.sub(r"^<[^>]*>: ", "", str(getattr(error, "reason", None) or error))


def _http_problem(status: int, body: bytes) -> str:
    try:
        payload = json.loads(body)
        # The gRPC gateway answers {"error", "message"}; the upload handler {"error_message"}.
        detail = (payload.get("message") or payload.get("error_message")
                  or payload.get("error") or "")
    except (ValueError, AttributeError):
        detail = (body or b"")[:200].decode(errors="replace").strip()
    hint = {401: f"; authenticate: put a bearer token in {TOKEN_ENV}, or port-forward with "
                 "kubectl (your kube config)",
            403: "; the token's identity may not use this namespace",
            409: "; the name is taken on the server",
            404: "; is this the KFP API (the ml-pipeline-ui or ml-pipeline service)?"}
    return f"HTTP {status}{': ' + detail if detail else ''}{hint.get(status, '')}"


@contextlib.contextmanager
def _quiet():
    """kfp.Client prints links and warns about server versions; we say what matters ourselves."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


class _Publication:
    """Each server call as one step; a failure names the step and what earlier steps created."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.created: List[str] = []

    def step(self, doing: str, call: Callable, *args, may_create: bool = False,
             taken_ok: bool = False, missing_ok: bool = False, **kwargs):
        """call(*args, **kwargs); with taken_ok, a 409 (the name is taken) returns None; with
        missing_ok, a 404 (it is gone already) returns None."""
        import kfp_server_api
        import urllib3

        try:
            with _quiet():
                return call(*args, **kwargs)
        except kfp_server_api.ApiException as error:
            if (taken_ok and error.status == 409) or (missing_ok and error.status == 404):
                return None
            problem = _http_problem(error.status, error.body)
        except urllib3.exceptions.HTTPError as error:
            problem = f"cannot reach KFP at {self.endpoint}: {_reason(error)}"
            if may_create:  # the request may have arrived, and only its answer was lost
                problem += ("; the server may have done it before the connection failed: "
                            "check the KFP UI")
        except ValueError as error:  # the client's own checks (e.g. duplicate names)
            problem = str(error)
        left = ("\nalready created on the server (nothing was rolled back):\n  - "
                + "\n  - ".join(self.created)) if self.created else \
            "\nnothing else was created on the server"
        raise KubeflowError(f"{doing} failed: {problem}{left}") from None


def publish(spec: Path, config: PipelineConfig, endpoint: str, schedule: bool) -> List[str]:
    """Uploads spec as a new version, then starts a run or replaces the nightly schedule."""
    problems = cluster_problems(config)
    if problems:
        raise KubeflowError("not uploaded: the config is not ready for a cluster (nothing was "
                            "sent):\n  " + "\n  ".join(problems))
    kf = config.kubeflow
    client = connect(endpoint, kf.namespace)
    job = _Publication(endpoint)
    pipeline_id, version_id, version_name = _upload(client, job, spec, config)
    lines = [f"Uploaded {spec.name} as pipeline '{config.pipeline_name}' version {version_name} "
             f"({version_id})"]
    experiment_id = _experiment_id(client, job, kf.experiment, kf.namespace)
    # The backend's driver reads the root from the run's runtime config only (KFP 2.3.0
    # backend/src/v2/driver/driver.go); the spec's defaultPipelineRoot is never read.
    refs = dict(pipeline_id=pipeline_id, version_id=version_id,
                service_account=kf.service_account, pipeline_root=kf.pipeline_root)
    if not schedule:
        run = job.step("starting a run", client.run_pipeline, experiment_id,
                       f"{config.pipeline_name}-{_stamp()}", may_create=True, **refs)
        lines.append(f"Started run {run.run_id} in experiment '{kf.experiment}', pipeline root "
                     f"{kf.pipeline_root}: {endpoint.rstrip('/')}/#/runs/details/{run.run_id}")
        return lines
    return lines + _replace_schedule(client, job, config, experiment_id, refs)


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")


def version_name(pipeline_name: str, spec_bytes: bytes) -> str:
    """When, which spec, and a random suffix: two publishes in the same second (same spec or
    not, same machine or not) get different names, which the server requires per pipeline."""
    digest = hashlib.sha256(spec_bytes).hexdigest()[:8]
    return f"{pipeline_name}-{_stamp()}-{digest}-{secrets.token_hex(3)}"


def _pipeline_id(client, job: _Publication, name: str, namespace: Optional[str]
                 ) -> Optional[str]:
    """The pipeline named name in namespace. kfp.Client.get_pipeline_id would not pass the
    namespace, and multi-user KFP then lists only the shared pipelines."""
    by_name = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name",
                                          "stringValue": name}]})
    listed = job.step(f"looking up pipeline '{name}'", client.list_pipelines, filter=by_name,
                      namespace=namespace, page_size=2)
    found = [p.pipeline_id for p in listed.pipelines or [] if p.display_name == name]
    return found[0] if found else None


def _upload(client, job: _Publication, spec: Path, config: PipelineConfig):
    """(pipeline id, version id, version name): a new pipeline the first time, else a version."""
    name, namespace = config.pipeline_name, config.kubeflow.namespace
    pipeline_id = _pipeline_id(client, job, name, namespace)
    if pipeline_id is None:
        pipeline = job.step(f"creating pipeline '{name}'", client.upload_pipeline, str(spec),
                            pipeline_name=name, description=f"TFX pipeline {name}",
                            namespace=namespace, may_create=True, taken_ok=True)
        if pipeline is not None:
            job.created.append(f"pipeline '{name}' ({pipeline.pipeline_id})")
            versions = job.step("reading the new pipeline's version",
                                client.list_pipeline_versions, pipeline.pipeline_id)
            first = versions.pipeline_versions[0]
            return pipeline.pipeline_id, first.pipeline_version_id, first.display_name
        # 409: another publish created it since the look-up; add a version to that one.
        pipeline_id = _pipeline_id(client, job, name, namespace)
        if pipeline_id is None:
            raise KubeflowError(f"pipeline '{name}' exists on the server (HTTP 409) but is not "
                                f"listed in namespace '{namespace or ''}': check "
                                "kubeflow.namespace, or delete the pipeline in the KFP UI\n"
                                "nothing was created on the server")
    created = None
    for attempt in (1, 2):  # a name taken anyway (1 in 16M) gets one more random suffix
        version = version_name(name, spec.read_bytes())
        created = job.step(f"uploading version {version}", client.upload_pipeline_version,
                           str(spec), version, pipeline_id=pipeline_id, may_create=True,
                           taken_ok=attempt == 1)
        if created is not None:
            break
    job.created.append(f"pipeline version {version} ({created.pipeline_version_id})")
    return pipeline_id, created.pipeline_version_id, version


def _experiment_id(client, job: _Publication, name: str, namespace: Optional[str]) -> str:
    """Get or create; a 409 means another publish created it meanwhile: read that one."""
    experiment = job.step(f"getting or creating experiment '{name}'", client.create_experiment,
                          name, namespace=namespace, may_create=True, taken_ok=True)
    if experiment is None:
        experiment = job.step(f"reading experiment '{name}'", client.get_experiment,
                              experiment_name=name, namespace=namespace)
    return experiment.experiment_id


def recurring_run_name(config: PipelineConfig) -> str:
    return f"{config.pipeline_name}-nightly"


def _replace_schedule(client, job: _Publication, config: PipelineConfig, experiment_id: str,
                      refs: dict) -> List[str]:
    """KFP cannot edit a recurring run: create the new one, then leave exactly one of that name
    in the experiment (_keep_one). Until the old one is deleted both are scheduled: a night that
    starts in that moment is stopped by the run lease (core/run_lease.py)."""
    name = recurring_run_name(config)
    new = job.step(f"creating recurring run {name}", client.create_recurring_run,
                   experiment_id, name, cron_expression=config.kubeflow.kfp_cron,
                   max_concurrency=1, no_catchup=True, enabled=True,
                   description=f"{config.pipeline_name}, cron '{config.kubeflow.schedule}'",
                   may_create=True, **refs)
    job.created.append(f"recurring run {name} ({new.recurring_run_id})")
    kept, deleted = _keep_one(client, job, name, experiment_id, new.recurring_run_id)
    if kept != new.recurring_run_id:
        return [f"Recurring run {name}: another publish created {kept} after this one's "
                f"{new.recurring_run_id}, so its version is the one scheduled; this one's was "
                f"deleted ({len(deleted)} deleted in all): "
                f"{job.endpoint.rstrip('/')}/#/recurringrun/details/{kept}"]
    verb = f"replaced {len(deleted)} earlier one(s)" if deleted else "created"
    return [f"Recurring run {name} ({new.recurring_run_id}) {verb} in experiment "
            f"'{config.kubeflow.experiment}': cron '{config.kubeflow.kfp_cron}' (KFP's 6 "
            "fields, seconds first), at most one run at a time, no catch-up, pipeline root "
            f"{config.kubeflow.pipeline_root}: "
            f"{job.endpoint.rstrip('/')}/#/recurringrun/details/{new.recurring_run_id}"]


def _named_recurring_runs(client, job: _Publication, name: str, experiment_id: str) -> list:
    by_name = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name",
                                          "stringValue": name}]})
    listed = job.step(f"listing recurring runs named {name}", client.list_recurring_runs,
                      experiment_id=experiment_id, filter=by_name, page_size=100)
    return [r for r in listed.recurring_runs or [] if r.display_name == name]


def _newest(recurring_runs: list):
    """The one every publish keeps: the newest created, then the greatest id. Two publishes at
    once agree on it, so each deletes the same others and one is left, not none or two."""
    oldest = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)
    return max(recurring_runs, key=lambda r: (r.created_at or oldest, r.recurring_run_id))


def _keep_one(client, job: _Publication, name: str, experiment_id: str, new_id: str,
              rounds: int = 2):
    """(the id left, the ids deleted): every recurring run named name but the newest is deleted,
    a failed delete is tried again, and the list is read back until one is left. When an old one
    cannot be deleted, the new one is deleted instead, so that the old one is left alone to
    schedule (KubeflowError says so); when even that fails, the error lists what is left."""
    deleted, failed = [], {}
    for attempt in range(rounds + 1):  # the last round only reads back
        found = _named_recurring_runs(client, job, name, experiment_id)
        if not found:
            raise KubeflowError(f"recurring run {name} ({new_id}) was deleted while publishing "
                                "(by another publish or in the UI): none is scheduled now; "
                                "publish again")
        keep = _newest(found)
        others = [r.recurring_run_id for r in found if r.recurring_run_id != keep.recurring_run_id]
        if not others:
            return keep.recurring_run_id, deleted
        if attempt == rounds:
            break
        failed = {}
        for other in others:
            try:
                job.step(f"deleting the previous recurring run {other}",
                         client.delete_recurring_run, other, missing_ok=True)
                deleted.append(other)
            except KubeflowError as error:
                failed[other] = str(error).splitlines()[0]
    if not failed:  # deleted, yet listed again (or others appeared meanwhile)
        failed = {other: "still listed after it was deleted" for other in others}
    return _roll_back(client, job, name, experiment_id, new_id, failed)


def _roll_back(client, job: _Publication, name: str, experiment_id: str, new_id: str,
               failed: dict):
    problems = "\n  ".join(f"{i}: {why}" for i, why in failed.items())
    try:
        job.step(f"deleting the new recurring run {new_id} again", client.delete_recurring_run,
                 new_id, missing_ok=True)
        job.created.remove(next(c for c in job.created if new_id in c))
    except KubeflowError as error:
        problems += f"\n  {new_id} (the new one): {str(error).splitlines()[0]}"
    left = [r.recurring_run_id for r in _named_recurring_runs(client, job, name, experiment_id)]
    state = (f"the previous one, {left[0]}, is left alone and still schedules the previous "
             "version" if len(left) == 1 and left[0] != new_id
             else f"{len(left)} are left ({', '.join(left)}): delete all but one in the KFP UI "
                  "(Recurring runs), or publish again")
    raise KubeflowError(f"replacing recurring run {name} failed: could not delete\n  "
                        f"{problems}\n{state}")
