"""A loopback stand-in for TF Serving's REST predict endpoint, for testing the client over HTTP.

It routes and answers like TF Serving (`POST /v1/models/<name>[/versions/<v>]:predict`, errors as
`{"error": ...}`) and hands each request's signature and `instances` to a predict function: the
pushed SavedModel (session_model.SessionModel.predict_instances) or a canned one. No TensorFlow
here, so client unit tests stay fast.
"""
from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List

PredictFn = Callable[[str, list], List[dict]]
_PREDICT_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/\d+)?:predict$")


class StubError(Exception):
    """Raised by a predict function: answered as TF Serving does, HTTP status + {"error": ...}."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class RestStub:
    """Serves one model on 127.0.0.1 at an ephemeral port; `received` lists every request body."""

    def __init__(self, model_name: str, predict: PredictFn):
        self.model_name, self.predict = model_name, predict
        self.received: List[dict] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
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

    def answer(self, path: str, raw_body: bytes) -> tuple:
        """(status, JSON object) for one POST, following TF Serving's REST rules."""
        match = _PREDICT_PATH.match(path)
        if not match:
            return 404, {"error": f"Malformed request: POST {path}"}
        try:
            body = json.loads(raw_body)  # Python's parser, like TF Serving's, accepts NaN
        except ValueError as error:
            return 400, {"error": f"JSON Parse error: {error}"}
        self.received.append(body)
        if match["name"] != self.model_name:
            return 404, {"error": f"Servable not found for request: Latest({match['name']})"}
        if not isinstance(body, dict) or not isinstance(body.get("instances"), list) \
                or not body["instances"]:
            return 400, {"error": "Missing or empty 'instances' list"}
        try:
            predictions = self.predict(body.get("signature_name", "serving_default"),
                                       body["instances"])
        except StubError as error:
            return error.status, {"error": str(error)}
        return 200, {"predictions": predictions}

    def _handler_class(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                status, content = stub.answer(self.path, self.rfile.read(length))
                payload = json.dumps(content).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # keep pytest output clean
                pass

        return Handler
