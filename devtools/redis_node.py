"""A real Redis on loopback for the tests and `make service-up`: Debian's `redis-server`
(scripts/install_test_tools.sh).

Each server runs in its own temporary folder (its working directory, log and nothing persisted:
no RDB snapshots, no AOF), bound to 127.0.0.1 on a free port, protected mode on. A missing
redis-server raises ServiceUnavailable with the install hint. ~50 ms to start (tests/
redis_server.py's fixture: a fresh, empty server per test):

    server = start(folder)
    server.client().set("k", "v")         # redis-py (in requirements.lock)
    restart(server)                       # the same port and folder; a SAVEd dump.rdb reloads

With `tls=ServerTLS(cert, key, ca)` it listens on TLS only (`--port 0 --tls-port P`; Debian's
build has TLS), client certificates optional (verified against `ca` when sent); with
`aclfile=path` its users are that file's (Redis ACL syntax; `user default off` refuses anonymous
clients). Tests: tests/service/test_data_plane.py.
"""
from __future__ import annotations

import dataclasses
import shutil
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Optional

from devtools.loopback import (ServiceUnavailable, free_port, stop_process,
                               wait_until_answering)

START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 10
INSTALL_HINT = ("redis-server not found: run scripts/install_test_tools.sh (the Debian package "
                "redis-server)")


@dataclasses.dataclass(frozen=True)
class ServerTLS:
    """PEM files of the server's certificate, its key and the CA that signs clients' ones;
    whether clients must present a certificate (`yes`) or may (`optional`)."""
    cert: Path
    key: Path
    ca: Path
    auth_clients: str = "optional"


@dataclasses.dataclass
class RedisServer:
    host: str
    port: int
    folder: Path
    process: subprocess.Popen
    tls: Optional[ServerTLS] = None
    aclfile: Optional[Path] = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/0"

    def client(self, **options):
        import redis

        return redis.Redis(host=self.host, port=self.port, decode_responses=True,
                           socket_timeout=5, **options)

    @property
    def log(self) -> str:
        path = self.folder / "redis.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _answers(host: str, port: int, tls: Optional[ServerTLS] = None) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as raw:
            sock = raw
            if tls is not None:
                sock = ssl.create_default_context(cafile=str(tls.ca)).wrap_socket(
                    raw, server_hostname=host)
            sock.sendall(b"PING\r\n")
            # Without a default user, PING is refused, but by a running server.
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except ssl.SSLError as e:  # a server that asks for a client certificate answered so
        return "CERTIFICATE_REQUIRED" in str(e).upper()
    except OSError:
        return False


def start(folder: Path, tls: Optional[ServerTLS] = None,
          aclfile: Optional[Path] = None) -> RedisServer:
    """Starts redis-server in `folder` on a free loopback port; returns once it answers PING."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServiceUnavailable(INSTALL_HINT)
    folder.mkdir(parents=True, exist_ok=True)
    return _run(binary, folder, "127.0.0.1", free_port(), tls, aclfile)


def restart(server: RedisServer) -> RedisServer:
    """Stops the server and starts it again on its port and folder: what clients see of a Redis
    restart. Nothing is persisted by itself; what a `SAVE` wrote (dump.rdb) is loaded again.
    `server` is updated in place (its new process), so a fixture's stop still stops it."""
    stop(server)
    server.process = _run(shutil.which("redis-server"), server.folder, server.host,
                          server.port, server.tls, server.aclfile).process
    return server


def _run(binary: str, folder: Path, host: str, port: int, tls: Optional[ServerTLS] = None,
         aclfile: Optional[Path] = None) -> RedisServer:
    listen = ["--port", str(port)]
    if tls is not None:
        listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(tls.cert),
                  "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca),
                  "--tls-auth-clients", tls.auth_clients]
    if aclfile is not None:
        listen += ["--aclfile", str(aclfile)]
    process = subprocess.Popen(
        [binary, "--bind", host, *listen, "--dir", str(folder),
         "--logfile", str(folder / "redis.log"), "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--protected-mode", "yes", "--databases", "1"],
        cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    server = RedisServer(host, port, folder, process, tls, aclfile)
    wait_until_answering(process, lambda: _answers(host, port, tls),
                         f"redis-server on {host}:{port}",
                         lambda: server.log, START_TIMEOUT_S, STOP_TIMEOUT_S, poll_s=0.02)
    return server


def stop(server: RedisServer) -> None:
    """Terminates the server (then kills it); no process is left behind."""
    stop_process(server.process, STOP_TIMEOUT_S)

