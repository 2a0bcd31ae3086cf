"""make service-up's wait for TF Serving (devtools/service_up.py): the stand-in prints its gRPC
address after both its APIs listen, so a REST answer alone does not mean the address is known."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

from devtools.service_up import wait_for_tf_serving

# A stand-in that answers REST at once and prints its gRPC line a second later, as
# devtools/tf_serving/__main__.py does with a slow gRPC start.
LATE_LINE = textwrap.dedent("""
    import http.server, sys, threading, time
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(1.0)
    print("TF Serving 2.16.1 stand-in: m version 1 on http://127.0.0.1:%s and gRPC "
          "127.0.0.1:45678 (0 warmup records replayed)" % sys.argv[1], flush=True)
    time.sleep(60)
""")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_stand_ins_grpc_address_is_waited_for_not_read_at_the_first_rest_answer(tmp_path):
    port, log = _free_port(), tmp_path / "tf_serving.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-c", LATE_LINE, str(port)], stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        target = wait_for_tf_serving(f"http://127.0.0.1:{port}", "m", None, process, log)
    finally:
        process.kill()
        process.wait()
    assert target == "127.0.0.1:45678"


def test_a_real_servers_grpc_target_is_the_configs(tmp_path):
    port, log = _free_port(), tmp_path / "tf_serving.log"
    log.write_text("")
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-c", LATE_LINE, str(port)], stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        target = wait_for_tf_serving(f"http://127.0.0.1:{port}", "m", "localhost:8500",
                                     process, log)
    finally:
        process.kill()
        process.wait()
    assert target == "localhost:8500"


def test_a_burst_without_the_service_says_to_start_it(monkeypatch, capsys):
    """make service-burst before make service-up: one line naming the fix, exit 2, no traceback."""
    import service.config
    from devtools import request_burst
    from devtools.loopback import REPO

    raw = service.config.load_service_config(
        REPO / "configs" / "recommender_service.yaml").model_dump()
    raw["endpoint"].update(port=_free_port(), admin_port=_free_port())  # nothing listens
    monkeypatch.setattr(service.config, "load_service_config",
                        lambda path: service.config.ServiceConfig.model_validate(raw))
    assert request_burst.main(["--requests", "3"]) == 2
    error = capsys.readouterr().err
    assert "does not answer" in error and "make service-up" in error, error
