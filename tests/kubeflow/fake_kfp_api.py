"""A fake KFP v2beta1 API server on 127.0.0.1, as strict as the real one where publishing
relies on it.

Mirrors kubeflow/pipelines at tag 2.3.0, paths under backend/src/apiserver/; each behaviour names
its file. The same checks are at 2.4.1 and 2.5.0; at 2.0.5 the upload handler answers a taken
name with 500 instead of 409. It answers the requests kfp.Client 2.5
(kfp-server-api 2.0.5) makes, keeps pipelines, versions, experiments, runs and recurring runs in
memory, and records every request with its JSON body so tests can read what was sent.
Not modelled: authorization (SubjectAccessReview), Argo v1 templates, paging, filters other than
EQUALS on display_name, and anything after a run is created (workflows, the driver).
"""
from __future__ import annotations

import datetime
import email
import json
import re
import selectors
import socket
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, urlsplit

import yaml
from google.protobuf import json_format

from tests.helpers import load_yaml_all


def spec_pb2():
    """kfp's pipeline_spec_pb2, imported at first use: the kfp package takes seconds to import,
    which collecting the tests should not pay (tests/README.md)."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    return pipeline_spec_pb2


API = "/apis/v2beta1"
MAX_FILE_LENGTH = 32 << 20  # common/const.go MaxFileLength
# common/utils.go pipelineNamePattern: the spec's pipelineInfo.name, also MLMD's context name.
PIPELINE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
# v2/config/env.go: the root a run gets when its runtime config has none and the namespace's
# kfp-launcher ConfigMap sets no defaultPipelineRoot.
BACKEND_DEFAULT_ROOT = "minio://mlpipeline/v2/artifacts"
# grpc codes -> HTTP as grpc-gateway v1.16's runtime.HTTPStatusFromCode.
GRPC = {"InvalidArgument": (3, 400), "NotFound": (5, 404), "AlreadyExists": (6, 409),
        "Internal": (13, 500)}


class ApiError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class Request:
    method: str
    path: str
    query: dict
    headers: dict
    body: Optional[dict]  # the JSON body; None for uploads and bodiless requests


class FakeKfpApi(ThreadingHTTPServer):
    """`with FakeKfpApi() as kfp:` serves on kfp.url until the block ends."""

    def __init__(self, multi_user: bool = False, token: Optional[str] = None,
                 launcher_default_root: Optional[str] = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.multi_user, self.token = multi_user, token
        self.launcher_default_root = launcher_default_root  # the kfp-launcher ConfigMap's value
        self.pipelines, self.versions, self.experiments = {}, {}, {}
        self.runs, self.recurring_runs = {}, {}
        self.platform_specs: dict = {}  # version id -> the PlatformSpec parsed beside its spec
        self.requests: list = []
        self._clock = 0  # seconds after 2026-01-01 of the newest created_at
        self.failures: dict = {}  # (method, path regex) -> [status, payload, times left]
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._lock = threading.Lock()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="fake-kfp-api")

    # -- lifecycle: no polling; stop() wakes the loop through a socket pair --------------------
    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._wake_writer.send(b"x")
        self._thread.join()
        self.server_close()  # joins the handler threads (HTTP/1.0: one request a connection)
        self._wake_reader.close()
        self._wake_writer.close()

    def _serve(self):
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select():
                    if key.fileobj is self._wake_reader:
                        return
                    self._handle_request_noblock()

    # -- what tests use --------------------------------------------------------------------------
    def fail(self, method: str, path_regex: str, status: int, payload=None,
             times: Optional[int] = None) -> None:
        """Answer matching requests (the next `times` ones, or all) with status and payload;
        status 0 closes the connection without an answer."""
        self.failures[(method, path_regex)] = [status, payload, times]

    def sent(self, method: str, path: str) -> list:
        return [r for r in self.requests if r.method == method and r.path == API + path]

    def effective_pipeline_root(self, run: dict) -> str:
        """The root the run's steps would get (v2/driver/driver.go RootDAG, v2/config/env.go):
        runtimeConfig.gcsOutputDirectory (the API's pipeline_root, server/api_converter.go), else
        the kfp-launcher ConfigMap's defaultPipelineRoot, else minio://. The spec's own
        defaultPipelineRoot is not read."""
        return ((run.get("runtime_config") or {}).get("pipeline_root")
                or self.launcher_default_root or BACKEND_DEFAULT_ROOT)

    # -- resources (resource/resource_manager.go, storage/*_store.go) ----------------------------
    def namespace_of(self, requested: Optional[str]) -> str:
        # resource_manager.go ReplaceNamespace: single-user mode drops the namespace.
        return (requested or "") if self.multi_user else ""

    def add(self, table: dict, id_key: str, item: dict) -> dict:
        # model/*.go CreatedAtInSec: the server's clock, whole seconds; here one more each time.
        self._clock += 1
        created = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
            seconds=self._clock)
        item = {**item, id_key: str(uuid.uuid4()),
                "created_at": created.strftime("%Y-%m-%dT%H:%M:%SZ")}
        table[item[id_key]] = item
        return item


def parse_pipeline_template(data: bytes):
    """template/template.go New + template/v2_template.go NewV2SpecTemplate: the YAML documents
    are decoded one by one; the one that strict protojson parses as a PipelineSpec with a name and
    a root is the spec (an unknown field makes it not one); a PlatformSpec with a kubernetes
    platform may come beside it; anything else is ignored. Returns (PipelineSpec, PlatformSpec
    or None)."""
    try:
        documents = [d for d in load_yaml_all(data) if d is not None]
    except yaml.YAMLError as error:
        raise ApiError("InvalidArgument", f"unable to decode yaml document: {error}") from None
    if not any(isinstance(d, dict) and _is_pipeline_spec(d) for d in documents):
        # template.go inferTemplateFormat -> Unknown
        raise ApiError("InvalidArgument", "InvalidInputError: unknown template format: pipeline "
                       "spec is invalid")
    spec = platform = None
    for value in documents:
        if not isinstance(value, dict):
            raise ApiError("InvalidArgument", "unable to decode yaml document")
        if _is_pipeline_spec(value):
            if spec is not None:
                raise ApiError("InvalidArgument", "multiple pipeline specs provided")
            spec = _strict(value, spec_pb2().PipelineSpec())
            if spec.schema_version != "2.1.0":
                raise ApiError("InvalidArgument", "InvalidInputError: KFP only supports schema "
                               "version 2.1.0, but the pipeline spec has version "
                               f"{spec.schema_version}: pipeline spec is invalid")
        elif _is_kubernetes_platform_spec(value):
            if platform is not None:
                raise ApiError("InvalidArgument", "multiple platform specs provided")
            platform = _strict(value, spec_pb2().PlatformSpec())
    return spec, platform


def _strict(value: dict, message):
    # protojson.Unmarshal without DiscardUnknown, after Go's json.Marshal of the YAML map.
    return json_format.ParseDict(json.loads(json.dumps(value, default=str)), message)


def _is_pipeline_spec(value: dict) -> bool:
    try:
        spec = _strict(value, spec_pb2().PipelineSpec())
    except json_format.ParseError:
        return False
    return bool(spec.pipeline_info.name) and spec.HasField("root")


def _is_kubernetes_platform_spec(value: dict) -> bool:
    # v2_template.go IsPlatformSpecWithKubernetesConfig
    try:
        return "kubernetes" in _strict(value, spec_pb2().PlatformSpec()).platforms
    except json_format.ParseError:
        return False


def _required_parameters(spec) -> list:
    # v2_template.go validatePipelineJobInputs: a root parameter that is neither optional nor
    # defaulted needs a value in the run's runtime config.
    parameters = spec.root.input_definitions.parameters
    return [name for name, p in parameters.items()
            if not p.is_optional and not p.HasField("default_value")]


def _named(items, query) -> list:
    """The list filter kfp.Client sends: EQUALS on display_name (server/list_request_util.go)."""
    wanted = []
    for predicate in json.loads(query.get("filter") or '{"predicates": []}')["predicates"]:
        # jsonpb takes an enum by name or number (filter.proto: EQUALS = 1).
        if predicate.get("key") != "display_name" or predicate.get("operation") not in (
                "EQUALS", 1):
            raise ApiError("InvalidArgument", f"the fake supports only EQUALS on display_name, "
                           f"not {predicate}")
        wanted.append(predicate.get("stringValue") or predicate.get("string_value"))
    return [i for i in items if all(i["display_name"] == w for w in wanted)]


class _Handler(BaseHTTPRequestHandler):
    server: FakeKfpApi

    def log_message(self, *args):  # quiet test output
        pass

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    def _handle(self, method: str):
        server, url = self.server, urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        is_json = (self.headers.get("Content-Type") or "").startswith("application/json")
        body = json.loads(raw) if raw and is_json else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        with server._lock:
            server.requests.append(Request(method, url.path, query, headers, body))
        if server.token and headers.get("authorization") != f"Bearer {server.token}":
            return self._gateway_error(ApiError("Unauthenticated", "Unauthenticated"), 401)
        for (fail_method, pattern), failure in list(server.failures.items()):
            status, payload, times = failure
            if fail_method == method and re.fullmatch(pattern, url.path) and times != 0:
                if times is not None:
                    failure[2] -= 1
                if status == 0:  # the answer is lost: close the connection without one
                    self.close_connection = True
                    return None
                return self._send(status, payload)
        route = f"{method} {url.path.removeprefix(API)}"
        if route in ("POST /pipelines/upload", "POST /pipelines/upload_version"):
            return self._upload(raw, query, version=route.endswith("version"))
        routes = [
            (r"GET /healthz", self._healthz),
            (r"GET /pipelines", self._list_pipelines),
            (r"GET /pipelines/([^/]+)/versions", self._list_versions),
            (r"GET /experiments", self._list_experiments),
            (r"POST /experiments", self._create_experiment),
            (r"POST /runs", self._create_run),
            (r"GET /recurringruns", self._list_recurring_runs),
            (r"POST /recurringruns", self._create_recurring_run),
            (r"DELETE /recurringruns/([^/]+)", self._delete_recurring_run),
        ]
        for pattern, handler in routes:
            match = re.fullmatch(pattern, route)
            if match:
                try:
                    with server._lock:
                        return self._send(200, handler(query, body or {}, *match.groups()))
                except ApiError as error:
                    return self._gateway_error(error)
        self._send(404, {"error": "Not Found", "code": 5, "message": "Not Found", "details": []})

    # -- apiserver/main.go: healthz ----------------------------------------------------------------
    def _healthz(self, query, body):
        return {"commit_sha": "fake", "tag_name": "2.3.0", "multi_user": self.server.multi_user}

    # -- server/pipeline_upload_server.go ---------------------------------------------------------
    def _upload(self, raw: bytes, query: dict, version: bool):
        message = email.message_from_bytes(
            f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode() + raw)
        parts = [p for p in message.walk()
                 if p.get_param("name", header="content-disposition") == "uploadfile"]
        if not parts:
            return self._upload_error(400, "Failed to read pipeline from file: http: no such "
                                      "file")
        filename, data = parts[0].get_filename() or "", parts[0].get_payload(decode=True) or b""
        # server/util.go ReadPipelineFile: by extension (or zip/tar.gz magic), at most 32 MiB.
        if len(data) > MAX_FILE_LENGTH:
            return self._upload_error(400, "Failed to read a pipeline spec file: Error read "
                                      "pipeline file: File size too large")
        if not filename.endswith((".yaml", ".yml", ".json")):
            return self._upload_error(400, "Failed to read a pipeline spec file: Unexpected "
                                      "pipeline file format. Support .zip, .tar.gz, .json or "
                                      "YAML")
        server = self.server
        name = query.get("name") or filename  # pipeline_server.go buildPipelineName
        with server._lock:
            if version:
                pipeline_id = query.get("pipelineid", "")
                if not pipeline_id:
                    return self._upload_error(400, "Failed to create a pipeline version due to "
                                              "error reading pipeline id")
                if pipeline_id not in server.pipelines:
                    return self._upload_error(400, "Failed to create a pipeline version due to "
                                              f"error reading namespace: pipeline {pipeline_id} "
                                              "not found")
            try:
                spec, platform = parse_pipeline_template(data)
            except ApiError as error:
                doing = "pipeline version" if version else "pipeline and a pipeline version"
                # Any error but AlreadyExists is answered 500, spec errors included.
                return self._upload_error(500, f"Failed to create a {doing}: {error}")
            if not PIPELINE_NAME.match(spec.pipeline_info.name):  # common/utils.go
                return self._upload_error(500, "InvalidInputError: pipeline's name must contain "
                                          "only lowercase alphanumeric characters or '-' and "
                                          "must start with alphanumeric characters")
            if version:
                # model/pipeline_version.go: unique_index idx_pipelineid_name (PipelineId, Name)
                if any(v["pipeline_id"] == pipeline_id and v["display_name"] == name
                       for v in server.versions.values()):
                    return self._upload_error(409, "Failed to create a pipeline version. The "
                                              "pipeline already exists.: Failed to create a new "
                                              f"pipeline version. The name {name} already "
                                              "exist. Specify a new name")
            else:
                namespace = server.namespace_of(query.get("namespace"))
                # model/pipeline.go: unique_index namespace_name (Name, Namespace)
                if any(p["display_name"] == name and p["namespace"] == namespace
                       for p in server.pipelines.values()):
                    return self._upload_error(409, "Failed to create a pipeline and a pipeline "
                                              "version. The pipeline already exists.: Failed to "
                                              f"create a new pipeline. The name {name} already "
                                              "exists. Please specify a new name")
                pipeline_id = server.add(server.pipelines, "pipeline_id", {
                    "display_name": name, "namespace": namespace,
                    "description": query.get("description", "")})["pipeline_id"]
            created = server.add(server.versions, "pipeline_version_id", {
                "pipeline_id": pipeline_id, "display_name": name,
                "description": query.get("description", ""),
                "pipeline_spec": json_format.MessageToDict(spec)})
            server.platform_specs[created["pipeline_version_id"]] = (
                json_format.MessageToDict(platform) if platform else None)
            # The upload of a new pipeline answers the pipeline, of a version the version.
            return self._send(200, created if version else server.pipelines[pipeline_id])

    # -- server/pipeline_server.go ----------------------------------------------------------------
    def _list_pipelines(self, query, body):
        namespace = self.server.namespace_of(query.get("namespace"))
        return {"pipelines": _named([p for p in self.server.pipelines.values()
                                     if p["namespace"] == namespace], query)}

    def _list_versions(self, query, body, pipeline_id):
        if pipeline_id not in self.server.pipelines:
            raise ApiError("NotFound", f"Pipeline {pipeline_id} not found")
        return {"pipeline_versions": [v for v in self.server.versions.values()
                                      if v["pipeline_id"] == pipeline_id]}

    # -- server/experiment_server.go, resource_manager.go CreateExperiment -----------------------
    def _list_experiments(self, query, body):
        namespace = self.server.namespace_of(query.get("namespace"))
        return {"experiments": _named([e for e in self.server.experiments.values()
                                       if e["namespace"] == namespace], query)}

    def _create_experiment(self, query, body):
        server, name = self.server, body.get("display_name", "")
        namespace = server.namespace_of(body.get("namespace"))
        if server.multi_user and not namespace:
            raise ApiError("InvalidArgument", "Failed to create a experiment: Namespace cannot "
                           "be empty")
        # model/experiment.go: unique_index idx_name_namespace; storage/experiment_store.go
        if any(e["display_name"] == name and e["namespace"] == namespace
               for e in server.experiments.values()):
            raise ApiError("AlreadyExists", "Failed to create a experiment: Already exist "
                           f"error: Failed to create a new experiment. The name {name} already "
                           "exists. Please specify a new name")
        return server.add(server.experiments, "experiment_id", {
            "display_name": name, "description": body.get("description", ""),
            "namespace": namespace, "storage_state": "AVAILABLE"})

    # -- server/run_server.go createRun, server/job_server.go createJob --------------------------
    def _experiment_namespace(self, body, what: str) -> str:
        # resource_manager.go GetValidExperimentNamespacePair
        experiment_id = body.get("experiment_id", "")
        if not experiment_id:
            if self.server.multi_user:
                raise ApiError("InvalidArgument", "Experiment id can not be empty in multi-user "
                               "mode")
            raise ApiError("InvalidArgument", "the fake has no default experiment")
        if experiment_id not in self.server.experiments:
            raise ApiError("NotFound", f"Failed to create {what}: Experiment {experiment_id} "
                           "not found")
        return self.server.experiments[experiment_id]["namespace"]

    def _version_spec(self, body, what: str):
        reference = body.get("pipeline_version_reference") or {}
        version = self.server.versions.get(reference.get("pipeline_version_id", ""))
        if version is None or version["pipeline_id"] != reference.get("pipeline_id"):
            # resource_manager.go CreateRun/CreateJob: fetchTemplateFromPipelineSpec -> Internal
            raise ApiError("Internal", f"Failed to create {what} due to error fetching "
                           f"manifest: pipeline version {reference} not found")
        spec = json_format.ParseDict(version["pipeline_spec"], spec_pb2().PipelineSpec())
        given = (body.get("runtime_config") or {}).get("parameters") or {}
        missing = [p for p in _required_parameters(spec) if p not in given]
        if missing:
            raise ApiError("InvalidArgument", f"invalid pipeline job inputs: parameter "
                           f"{missing[0]} is not optional, yet has neither default value nor "
                           "user provided value")
        return spec

    def _create_run(self, query, body):
        if not body.get("display_name"):
            raise ApiError("InvalidArgument", "Failed to create a run due to invalid name: The "
                           "run name is empty. Please specify a valid name")
        namespace = self._experiment_namespace(body, "a run")
        self._version_spec(body, "a run")
        return self.server.add(self.server.runs, "run_id", {
            **body, "namespace": namespace, "state": "PENDING", "storage_state": "AVAILABLE"})

    def _create_recurring_run(self, query, body):
        if not body.get("display_name"):  # job_server.go createJob; no unique name (model/job.go)
            raise ApiError("InvalidArgument", "Recurring run name is empty. Please specify a "
                           "valid name")
        namespace = self._experiment_namespace(body, "a recurring run")
        max_concurrency = int(body.get("max_concurrency") or 0)
        if not 1 <= max_concurrency <= 10:  # api_converter.go toModelJob
            raise ApiError("InvalidArgument", "Max concurrency of a recurring run must be at "
                           f"leas 1 and at most 10. Received {max_concurrency}")
        cron = ((body.get("trigger") or {}).get("cron_schedule") or {}).get("cron")
        if cron is not None and not _robfig_cron_v1(cron):
            raise ApiError("InvalidArgument", "Schedule cron is not a supported format"
                           "(https://godoc.org/github.com/robfig/cron).")
        self._version_spec(body, "a recurring run")
        return self.server.add(self.server.recurring_runs, "recurring_run_id", {
            **body, "namespace": namespace, "status": "ENABLED"})

    def _list_recurring_runs(self, query, body):
        found = [r for r in self.server.recurring_runs.values()
                 if not query.get("experiment_id")
                 or r["experiment_id"] == query["experiment_id"]]
        return {"recurringRuns": _named(found, query)}  # the proto field is recurringRuns

    def _delete_recurring_run(self, query, body, recurring_run_id):
        if self.server.recurring_runs.pop(recurring_run_id, None) is None:
            raise ApiError("NotFound", f"Recurring run {recurring_run_id} not found")
        return {}

    # -- answers ----------------------------------------------------------------------------------
    def _gateway_error(self, error: ApiError, status: Optional[int] = None):
        # grpc-gateway v1.16 runtime.DefaultHTTPError body
        code, http_status = GRPC.get(error.code, (16, 401))
        self._send(status or http_status, {"error": str(error), "code": code,
                                           "message": str(error), "details": []})

    def _upload_error(self, status: int, message: str):
        # pipeline_upload_server.go writeErrorToResponse: the v1beta1 Error message, as JSON
        self._send(status, {"error_message": message, "error_details": message})

    def _send(self, status: int, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _robfig_cron_v1(spec: str) -> bool:
    """github.com/robfig/cron v1.2.0 Parse (go.mod at 2.3.0): a descriptor, or 5-6 fields with
    SECONDS first (day of week optional): '0 2 * * *' parses, as 02 minutes past every hour."""
    if spec.startswith("@"):
        return spec in ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight",
                        "@hourly") or spec.startswith("@every ")
    fields = spec.split()
    return len(fields) in (5, 6) and all(re.fullmatch(r"[\d*?/,A-Za-z-]+", f) for f in fields)
