"""A loopback stand-in for TF Serving's REST predict endpoint, for testing the client over HTTP.

It routes and answers like TF Serving at a given release, `server_version` "2.16.1" (the
default, the deploy's image) or "2.20.0" (`POST /v1/models/<name>[/versions/<v>]:predict`, errors
as `{"error": ...}` with the server's HTTP status) and hands each request's signature and
`instances` to a predict function: the pushed SavedModel (session_model.SessionModel.
predict_instances) or a canned one. No TensorFlow here, so client unit tests stay fast.

What it refuses, each as the real server does (sources at tags 2.16.1 and 2.20.0 of
tensorflow/serving; the same at both unless a tag is named):
- a method other than exactly `predict`, `:PREDICT` included: the path regex is case-insensitive
  but ProcessRequest compares the method with "predict" case-sensitively, so nothing handles it
  and the status it started with is returned, 400 "Malformed request: POST <path>"
  (model_servers/http_rest_api_handler.cc ProcessRequest);
- a query string: the path handed to the handler is the request's path_and_query
  (util/net_http/server/internal/evhttp_request.cc ParsedEvRequest::decode), which the predict
  regex (anchored, FullMatch) does not match: 400 "Malformed request: POST <path>?<query>";
  a %-encoded model name is decoded (http_rest_api_util.cc ParseModelInfo, DecodeArg:
  curl_easy_unescape) and served under its decoded name;
- a body with both 'inputs' and 'instances': 400 "JSON Value: <body> Not formatted correctly
  expecting only one of 'inputs' or 'instances' keys to exist " (util/json_tensor.cc
  FillPredictRequestFromJson); `"signature_name": ""` is no error: GetInfoMap
  (http_rest_api_handler.cc) reads it as serving_default;
- a b64 string absl::Base64Unescape refuses (bad padding, a stray character): 400 "... Error:
  INVALID_ARGUMENT: Unable to base64 decode" (json_tensor.cc JsonDecodeBase64Object;
  rapidjson.absl_base64_unescape);
- data after the JSON document: refused at 2.16.1, ignored at 2.20.0 (json_tensor.cc ParseJson's
  flags; rapidjson.parse_body), and an empty body: "JSON Parse error: The document is empty";
- a request of more instances than the batching config's max_batch_size (`max_batch_size`; None:
  batching off): 400 "Task size <n> is larger than maximum input batch size <max>", as the
  server's batch scheduler answers with large-batch splitting off
  (servables/tensorflow/bundle_factory_util.h GetQueueOptions: input_batch_size_limit =
  max_batch_size, split only with enable_large_batch_splitting; TF's
  core/kernels/batching_util/shared_batch_scheduler.h Schedule);
- a path under /v1/ that is not a predict call: 400 "Malformed request: POST <path>"
  (model_servers/http_rest_api_handler.cc ProcessRequest; the path regex kPredictionApiGegex in
  model_servers/http_rest_api_util.cc);
- a body that is not JSON: 400 "JSON Parse error: ..." (util/json_tensor.cc ParseJson; the wording
  after the colon is Python's, not RapidJSON's);
- a number too big for a double, e.g. 1e400: 400 "JSON Parse error: Number too big to be stored in
  double. at offset: <byte>" (ParseJson's RapidJSON 1.1.0, reader.h ParseNumber, simulated below);
- a model name or version it has not loaded: 404 "Servable not found for request:
  Specific(<name>, <version>)" or "Latest(<name>)" (core/basic_manager.cc GetUntypedServableHandle,
  core/manager.h ServableRequest::DebugString; NOT_FOUND -> 404 in model_servers/http_server.cc
  ToHTTPStatusCode), checked after the body is parsed, as GetInfoMap runs inside
  FillPredictRequestFromJson.
What it accepts because the server does: any JSON number for a float input, 1e39 included (the
server stores it as float inf: json_tensor.cc AddValueToTensor, DT_FLOAT takes any IsNumber() and
GetFloat() casts; json_tensor_test.cc FloatTensorThatExceedsMaxReturnsInf), integers above 2^24
(rounded to the nearest float: FloatTensorWithPrecisionLoss), and NaN/Infinity
(kParseNanAndInfFlag). Known gap: RapidJSON also reads `Inf` and `-NaN`, which Python's parser
refuses; the client never writes them.

`row_format_inputs` turns the `instances` of a request into one batch per input as the server
does (json_tensor.cc FillTensorMapFromInstancesList and AddInstanceItem): each instance's value is
a scalar or a (nested) list whose shape is read from its first elements; every instance of one
request must give the same shape, so lists of unequal length in one request are refused
("Expecting tensor size: 3 but got: 2"); a value of the wrong JSON type is refused with its type.
The statuses are written as absl::Status::ToString does ("INVALID_ARGUMENT: ..."; TF Serving
before TF 2.13's absl status wrote "Invalid argument: ..."). A JSON value in a message is quoted as
the tag's json_tensor.cc quotes it (rapidjson.quote: pretty-printed at 2.16.1, arrays on one line
and cut at 256 bytes at 2.20.0).
"""
from __future__ import annotations

import contextlib
import inspect
import json
import re
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Iterable, List, Mapping, Optional

from devtools.tf_serving.rapidjson import (DEFAULT_SERVER_VERSION, ParseError,
                                     absl_base64_unescape, check_version, parse_body, quote)
from devtools.tf_serving.metrics import Metrics
from devtools.tf_serving.servables import ServableError, Servables

PredictFn = Callable[[str, list], List[dict]]
# http_rest_api_util.cc kPredictionApiGegex (labels left out: the stub loads no labels): the
# method matched case-insensitively, as the regex does; the handler then wants "predict" exactly.
_PREDICT_PATH = re.compile(r"(?i)/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?"
                           r":(?P<method>classify|regress|predict)")
# http_rest_api_handler.cc kModelStatusApiRegex (labels left out, as above): GET model status.
_STATUS_PATH = re.compile(r"(?i)/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?")
# A JSON string (skipped) or a JSON number token, to find numbers RapidJSON refuses.
_STRING_OR_NUMBER = re.compile(rb'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)')
INT64_MAX = 2**63 - 1
# The status an HTTP answer came from (model_servers/http_server.cc ToHTTPStatusCode, reversed
# for the codes the stand-in answers).
_HTTP_CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 500: "INTERNAL"}


class StubError(Exception):
    """Raised by a predict function: answered as TF Serving does, HTTP status + {"error": ...}."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class RestStub:
    """Serves one model on 127.0.0.1 at an ephemeral port; `received` lists every request body.

    server_version: the TF Serving release whose behaviour it follows (SERVER_VERSIONS);
    max_batch_size: the batching config's limit on one request's instances (None: no batching)."""

    def __init__(self, model_name: str, predict: PredictFn, versions: Iterable[int] = (1,),
                 server_version: str = DEFAULT_SERVER_VERSION,
                 max_batch_size: Optional[int] = None, port: int = 0,
                 metrics: Optional[Metrics] = None):
        self.model_name, self.predict = model_name, predict
        # TF Serving's request metrics, shared with the gRPC stand-in of the same process and
        # served at GET /monitoring/prometheus/metrics (metrics.py).
        self.metrics = metrics or Metrics()
        self.server_version = check_version(server_version)
        self.max_batch_size = max_batch_size
        self.versions = set(versions)  # the loaded versions; unversioned calls go to the newest
        self.received: List[dict] = []
        # Open connections: a stopped server closes them, as a TF Serving process that exits
        # does (kept-alive connections would otherwise go on being answered by their threads).
        self._connections: set = set()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits for one, at every test's teardown.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "RestStub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for connection in list(self._connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def answer(self, path: str, raw_body: bytes) -> tuple:
        """(status, JSON object) for one POST, following TF Serving's REST rules. `path`: the
        request target as sent, query string included (evhttp_request.cc path_and_query)."""
        version_quote = self.server_version
        match = _PREDICT_PATH.fullmatch(path)
        if not path.lower().startswith("/v1/"):
            # No handler outside /v1/ (kHTTPRestApiHandlerPathRegex): a 404; the body is ours.
            return 404, {"error": f"Not found: POST {path}"}
        if not match:
            return 400, {"error": f"Malformed request: POST {path}"}
        # ParseModelInfo (http_rest_api_util.cc): the name decoded (DecodeArg), the version
        # converted, both before the method is looked at.
        name = urllib.parse.unquote(match["name"], errors="surrogateescape")
        version = match["version"]
        if version is not None and int(version) > INT64_MAX:  # absl::SimpleAtoi into int64
            return 400, {"error": f"Failed to convert version: {version} to numeric."}
        if match["method"] != "predict":  # http_rest_api_handler.cc: *method == "predict"
            if match["method"] in ("classify", "regress"):
                return 400, {"error": f"the stand-in serves predict only, not {match['method']}"}
            return 400, {"error": f"Malformed request: POST {path}"}
        try:
            body, end = parse_body(raw_body, self.server_version)
        except ParseError as error:
            return 400, {"error": str(error)}
        too_big = number_too_big_offset(raw_body[:end])  # 2.20.0 reads nothing after `end`
        if too_big is not None:
            return 400, {"error": "JSON Parse error: Number too big to be stored in double. "
                                  f"at offset: {too_big}"}
        self.received.append(body)
        # The order of json_tensor.cc FillPredictRequestFromJson: the document, signature_name,
        # the servable (GetInfoMap), then 'instances'.
        if not isinstance(body, dict):
            return 400, {"error": f"JSON Value: {quote(body, version_quote)} Is not object"}
        if not isinstance(body.get("signature_name", ""), str):
            return 400, {"error": f"JSON Value: {quote(body, version_quote)} not formatted "
                                  "correctly. 'signature_name' key must be a string value."}
        try:  # servables.py: the same lookup as the gRPC stand-in's
            Servables(self.model_name, self.versions).resolve(
                name, None if version is None else int(version))
        except ServableError as error:  # NOT_FOUND -> 404 (http_server.cc ToHTTPStatusCode)
            return 404, {"error": str(error)}
        if "instances" in body and "inputs" in body:
            return 400, {"error": f"JSON Value: {quote(body, version_quote)} Not formatted "
                                  "correctly expecting only one of 'inputs' or 'instances' keys "
                                  "to exist "}
        if "instances" not in body:
            if "inputs" in body:  # the server reads it (FillTensorMapFromInputsMap); not here
                return 400, {"error": "the stand-in answers the row format ('instances') only"}
            return 400, {"error": "Missing 'inputs' or 'instances' key"}
        if not isinstance(body["instances"], list):
            return 400, {"error": f"JSON Value: {quote(body, version_quote)} Expecting "
                                  "'instances' to be an list/array"}
        if not body["instances"]:
            return 400, {"error": f"JSON Value: {quote(body, version_quote)} No values in "
                                  "'instances' array"}
        if self.max_batch_size is not None and len(body["instances"]) > self.max_batch_size:
            # The batching session's scheduler, before the model runs (shared_batch_scheduler.h).
            return 400, {"error": f"Task size {len(body['instances'])} is larger than maximum "
                                  f"input batch size {self.max_batch_size}"}
        # GetInfoMap: an empty signature_name is the default signature.
        signature = body.get("signature_name") or "serving_default"
        try:
            predictions = _call(self.predict, signature, body["instances"], self.server_version)
        except StubError as error:
            return error.status, {"error": str(error)}
        return 200, {"predictions": predictions}

    def status(self, path: str) -> tuple:
        """(status, JSON object) for one GET: the model status API (http_rest_api_handler.cc
        ProcessModelStatusRequest; model_servers/get_model_status_impl.cc at 2.16.1 and 2.20.0:
        every version the monitor knows, or NOT_FOUND "Could not find any versions of model
        <name>" / "Could not find version <v> of model <name>", 404). The JSON is the
        GetModelStatusResponse printed with preserve_proto_field_names and
        always_print_primitive_fields: error_code "OK" and an empty error_message for a
        loaded version."""
        match = _STATUS_PATH.fullmatch(path)
        if not path.lower().startswith("/v1/"):
            return 404, {"error": f"Not found: GET {path}"}
        if not match:
            return 400, {"error": f"Malformed request: GET {path}"}
        name = urllib.parse.unquote(match["name"], errors="surrogateescape")
        versions = sorted(self.versions) if name == self.model_name else []
        if match["version"] is not None:
            version = int(match["version"])
            if version not in versions:
                return 404, {"error": f"Could not find version {version} of model {name}"}
            versions = [version]
        if not versions:
            return 404, {"error": f"Could not find any versions of model {name}"}
        return 200, {"model_version_status": [
            {"version": str(v), "state": "AVAILABLE",
             "status": {"error_code": "OK", "error_message": ""}} for v in versions]}

    def _handler_class(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as TF Serving's libevent server (util/net_http/server/internal/
            # evhttp_server.cc) holds HTTP/1.1 connections open: clients' pools reuse them.
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes: without TCP_NODELAY the second waits for
            # the client's delayed ACK (~40 ms per request on a kept-alive connection).
            disable_nagle_algorithm = True

            def setup(self):
                super().setup()
                with stub._lock:
                    stub._connections.add(self.connection)

            def finish(self):
                with stub._lock:
                    stub._connections.discard(self.connection)
                super().finish()

            def do_GET(self):  # noqa: N802 (http.server's naming)
                if self.path == "/monitoring/prometheus/metrics":  # prometheus_exporter.cc
                    payload = stub.metrics.prometheus().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self._send(*stub.status(self.path))

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                start = time.perf_counter()
                status, content = stub.answer(self.path, self.rfile.read(length))
                self._send(status, content)
                # http_server.cc: every predict call counts, by the model name in its path.
                match = _PREDICT_PATH.fullmatch(self.path)
                if match:
                    stub.metrics.record(
                        urllib.parse.unquote(match["name"], errors="surrogateescape"),
                        _HTTP_CODES.get(status, "UNKNOWN"), match["method"], "REST",
                        (time.perf_counter() - start) * 1e6)

            def _send(self, status: int, content: dict) -> None:
                payload = json.dumps(content).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # keep pytest output clean
                pass

        return Handler


def _call(predict: PredictFn, signature: str, instances: list, server_version: str):
    """A predict function that takes `server_version` (SessionModel.predict_instances) gets it."""
    try:
        takes_version = "server_version" in inspect.signature(predict).parameters
    except (TypeError, ValueError):
        takes_version = False
    if takes_version:
        return predict(signature, instances, server_version=server_version)
    return predict(signature, instances)


def number_too_big_offset(raw_body: bytes) -> Optional[int]:
    """Byte offset of the first number RapidJSON 1.1.0 refuses as too big for a double, if any.

    Simulates reader.h ParseNumber: the integer part is exact while it fits uint64 (int64 when
    negative), then goes on as a double and fails once it passes DBL_MAX/10 before a digit; a
    positive exponent fails when it exceeds 308 minus the fraction digits kept in the significand.
    Numbers that merely round to infinity (2e308) are accepted, as there.
    """
    for match in _STRING_OR_NUMBER.finditer(raw_body):
        if match[1] and _rapidjson_too_big(match[1].decode()):
            return match.start(1)
    return None


def _rapidjson_too_big(token: str) -> bool:
    minus = token.startswith("-")
    number = re.fullmatch(r"-?(\d+)(?:\.(\d+))?(?:[eE]([+-]?)(\d+))?", token)
    integer, fraction, exp_sign, exp_digits = number.groups()
    limit = 2**63 if minus else 2**64 - 1
    value, significant, as_double = int(integer[0]), 0, None
    for digit in integer[1:]:
        if as_double is None and value * 10 + int(digit) > limit:
            as_double = float(value)
        if as_double is None:
            value, significant = value * 10 + int(digit), significant + 1
        elif as_double >= 1.7976931348623157e307:
            return True
        else:
            as_double = as_double * 10 + int(digit)
    exp_frac = 0
    if fraction and as_double is None:
        for digit in fraction:
            if value > 2**53 - 1:
                break
            value, exp_frac = value * 10 + int(digit), exp_frac - 1
            significant += value != 0
        # the rest of the fraction adds digits while fewer than 17 are significant
        rest = fraction[-exp_frac:] if exp_frac else fraction
        exp_frac -= min(len(rest), max(0, 17 - significant))
    elif fraction:
        exp_frac -= min(len(fraction), max(0, 17 - significant))
    if exp_digits and exp_sign != "-":
        max_exp = 308 - exp_frac
        exp = int(exp_digits[0])
        for digit in exp_digits[1:]:
            exp = exp * 10 + int(digit)
            if exp > max_exp:
                return True
    return False


# JSON value -> is it of this input dtype (json_tensor.cc AddValueToTensor), by the DataTypeString
# of the signature's dtype. A float takes any JSON number (see the module's docstring).
_LEAF_TYPES = {
    "string": lambda v: isinstance(v, str),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "int32": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31,
    "int64": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
    "bool": lambda v: isinstance(v, bool),
}


class _ItemError(Exception):
    """One instance value the server refuses; the message is its status's."""


def _json_type(value) -> str:
    """json_tensor.cc JsonTypeString."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def _is_b64(value) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str)


def _dense_shape(value) -> List[int]:
    """json_tensor.cc GetDenseTensorShape: the sizes of the first elements, level by level."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _leaves(value, level: int, shape: List[int], dtype: str, out: list,
            server_version: str = DEFAULT_SERVER_VERSION):
    """json_tensor.cc FillTensorProto: every leaf at the tensor's rank, lists of the shape's
    sizes, leaves of the dtype; returns the value with b64 strings decoded
    (JsonDecodeBase64Object: absl::Base64Unescape, "Unable to base64 decode" when it fails)."""
    if not isinstance(value, list):
        if level != len(shape):
            raise _ItemError(f"INVALID_ARGUMENT: JSON Value: {quote(value, server_version)} "
                             "found at "
                             f"incorrect level: {level + 1} in the JSON DOM. Expected at level: "
                             f"{len(shape)}")
        if isinstance(value, dict):
            if dtype != "string" or not _is_b64(value):
                raise _ItemError(f"INVALID_ARGUMENT: JSON Value: {quote(value, server_version)} "
                                 + ("not formatted correctly for base64 data" if dtype == "string"
                                    else f"Type: Object is not of expected type: {dtype}"))
            decoded = absl_base64_unescape(value["b64"])
            if decoded is None:
                raise _ItemError("INVALID_ARGUMENT: Unable to base64 decode")
            out.append(None)
            return decoded
        if not _LEAF_TYPES[dtype](value):
            raise _ItemError(f"INVALID_ARGUMENT: JSON Value: {quote(value, server_version)} "
                             f"Type: {_json_type(value)} is not of expected type: {dtype}")
        out.append(None)
        return value
    if level >= len(shape):
        raise _ItemError(f"INVALID_ARGUMENT: Encountered list at unexpected level: {level} "
                         f"expected < {len(shape)}")
    if len(value) != shape[level]:
        raise _ItemError(f"INVALID_ARGUMENT: Encountered list at unexpected size: {len(value)} "
                         f"at level: {level} expected size: {shape[level]}")
    return [_leaves(v, level + 1, shape, dtype, out, server_version) for v in value]


def row_format_inputs(instances: list, dtypes: Mapping[str, str],
                      server_version: str = DEFAULT_SERVER_VERSION) -> Dict[str, list]:
    """The batch of each input (name -> one value per instance, lists nested as sent) from a
    request's `instances`, checked as json_tensor.cc FillTensorMapFromInstancesList checks them;
    dtypes: input name -> DataTypeString ("string", "float", "int64", ...). Raises StubError(400)
    with the server's message, values quoted as `server_version`'s json_tensor.cc quotes them."""
    names = sorted(dtypes)

    def is_object(item) -> bool:
        return isinstance(item, dict) and not _is_b64(item)

    if not isinstance(instances[0], dict) and len(names) > 1:
        raise StubError(400, "instances is a plain list, but expecting list of objects as "
                             "multiple input tensors required as per tensorinfo_map")
    objects = is_object(instances[0])
    columns: Dict[str, list] = {name: [] for name in names}
    shapes: Dict[str, tuple] = {}

    def add(value, name: str) -> None:
        if name not in dtypes:
            raise _ItemError(f"INVALID_ARGUMENT: JSON object: does not have named input: {name}")
        shape, leaves = _dense_shape(value), []
        columns[name].append(_leaves(value, 0, shape, dtypes[name], leaves, server_version))
        if name not in shapes:
            shapes[name] = (len(leaves), shape)
        elif shapes[name][0] != len(leaves):
            raise _ItemError(f"INVALID_ARGUMENT: Expecting tensor size: {shapes[name][0]} but "
                             f"got: {len(leaves)}")
        elif shapes[name][1] != shape:
            expected, got = (",".join(map(str, s)) for s in (shapes[name][1], shape))
            raise _ItemError(f"INVALID_ARGUMENT: Expecting shape [{expected}] but got: [{got}]")

    for index, item in enumerate(instances):
        if objects:
            if not is_object(item):
                raise StubError(400, f"Expecting object but got list at item {index} of input "
                                     "list")
            for name, value in item.items():
                try:
                    add(value, name)
                except _ItemError as error:
                    raise StubError(400, f"Failed to process element: {index} key: {name} of "
                                         f"'instances' list. Error: {error}") from None
            if set(item) != set(names):
                raise StubError(400, f"Failed to process element: {index} of 'instances' list. "
                                     f"JSON object: {quote(item, server_version)} keys must be "
                                     "equal to: "
                                     f"{','.join(names)}")
        else:
            if is_object(item):
                raise StubError(400, f"Expecting value/list but got object at item {index} of "
                                     "input list")
            try:
                add(item, names[0])
            except _ItemError as error:
                raise StubError(400, f"Failed to process element: {index} of 'instances' list. "
                                     f"Error: {error}") from None
    return columns
