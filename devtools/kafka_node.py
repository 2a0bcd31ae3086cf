"""A real Kafka on loopback for the tests and `make service-up`: one KRaft node (broker and
controller in one process) of Kafka 4.x, run on the machine's JDK from the jars `make tools`
(scripts/fetch_jars.sh) fetched from Maven Central at set-up (deploy/kafka/pom.xml, checked
against deploy/kafka/jars.sha256). Nothing is fetched here: missing jars, or jars that differ
from the pinned list, raise ServiceUnavailable with the fix.

Each node gets its own folder (server.properties, the KRaft log dir, the server's log), a free
loopback port for clients and one for the controller; storage is formatted (`StorageTool format
--standalone`) before the start, and the node counts as up once it answers an ApiVersions request
on its client port. ~5-10 s to start (tests/kafka_server.py's fixture is module-scoped).

    server = start(folder)
    server.bootstrap            # '127.0.0.1:PORT', a client's bootstrap.servers
    create_topic(server, "clicks", partitions=2)   # the node creates none by itself
    restart(server)             # the same folder, ports and data: a broker that went away

Topics are created explicitly (`auto.create.topics.enable=false`): a misspelt topic in a client's
config fails loudly instead of creating a topic nobody reads.

`start(folder, sasl=SaslSsl(keystore, password, users))` adds a SASL_SSL listener on a port of
its own (`server.sasl_bootstrap`): TLS with the PKCS#12 keystore's certificate, SCRAM-SHA-512
logins of `users` (created by `StorageTool format --add-scram`, as a cluster is bootstrapped), and
the StandardAuthorizer: a SCRAM user may do only what an ACL allows. The PLAINTEXT listener stays
for the tests' own admin (its anonymous principal is the super user), as the controller's.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import struct
import subprocess
from pathlib import Path
from typing import Dict, Optional

from devtools.loopback import (REPO, ServiceUnavailable, free_port, stop_process,
                               wait_until_answering)


LOCK = REPO / "deploy" / "kafka" / "jars.sha256"
FIX = "run `make tools` (scripts/fetch_jars.sh deploy/kafka/pom.xml ...)"
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30
# Small and single-threaded enough for 2 shared cores; the node holds little data.
JVM = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-Djava.awt.headless=true"]
API_VERSIONS = 18

PROPERTIES = """\
process.roles=broker,controller
node.id=1
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}{sasl_listener}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}{sasl_listener}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
controller.quorum.bootstrap.servers=127.0.0.1:{controller}
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
"""

SASL_PROPERTIES = """\
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PKCS12
listener.name.sasl_ssl.ssl.keystore.location={keystore}
listener.name.sasl_ssl.ssl.keystore.password={password}
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
"""

LOG4J2 = """\
<Configuration status="warn">
  <Appenders>
    <File name="file" fileName="{log}"><PatternLayout pattern="[%d] %p %m (%c)%n"/></File>
  </Appenders>
  <Loggers><Root level="info"><AppenderRef ref="file"/></Root></Loggers>
</Configuration>
"""


@dataclasses.dataclass(frozen=True)
class SaslSsl:
    """The SASL_SSL listener's TLS keystore (PKCS#12) and SCRAM-SHA-512 users {name: password}."""
    keystore: Path
    keystore_password: str
    users: Dict[str, str]


@dataclasses.dataclass
class KafkaServer:
    port: int
    controller_port: int
    folder: Path
    process: subprocess.Popen
    sasl_port: Optional[int] = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def jars_folder() -> Path:
    return Path(os.environ.get("KAFKA_JARS", REPO / ".cache" / "kafka")) / "jars"


def jar_problem(folder: Path) -> Optional[str]:
    """None when `folder` holds exactly the pinned jars, else what differs."""
    pinned = dict(reversed(line.split()) for line in LOCK.read_text().splitlines() if line)
    present = {p.name: p for p in folder.glob("*.jar")} if folder.is_dir() else {}
    if not present:
        return f"no Kafka jars in {folder}"
    missing, extra = sorted(set(pinned) - set(present)), sorted(set(present) - set(pinned))
    changed = sorted(name for name in set(pinned) & set(present)
                     if hashlib.sha256(present[name].read_bytes()).hexdigest() != pinned[name])
    if missing or extra or changed:
        return f"the jars in {folder} are not {LOCK.name}'s: missing {missing}, extra {extra}, " \
               f"changed {changed}"
    return None


def api_versions(port: int, timeout: float = 2.0) -> dict:
    """An ApiVersions v0 request, the first thing every Kafka client sends: {api_key:
    (min_version, max_version)} of the broker's answer. Raises OSError when nothing answers."""
    client = b"tests"
    body = struct.pack(">hhih", API_VERSIONS, 0, 1, len(client)) + client
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the connection closed mid-answer")
            data += chunk
    correlation, error, count = struct.unpack(">ihi", data[4:14])
    if correlation != 1 or error != 0:
        raise ConnectionError(f"ApiVersions answered correlation {correlation}, error {error}")
    return {key: (low, high) for key, low, high in
            (struct.unpack(">hhh", data[14 + 6 * i:20 + 6 * i]) for i in range(count))}


def _java(folder: Path, *args: str) -> list:
    java = shutil.which("java")
    if java is None:
        raise ServiceUnavailable("java not found: run scripts/install_test_tools.sh (Debian "
                    "default-jre-headless)")
    return [java, *JVM, f"-Dlog4j2.configurationFile={folder / 'log4j2.xml'}",
            "-cp", f"{jars_folder()}/*", *args]


def start(folder: Path, sasl: Optional[SaslSsl] = None) -> KafkaServer:
    """Formats and starts one KRaft node in `folder`; returns once it answers ApiVersions."""
    problem = jar_problem(jars_folder())
    if problem:
        raise ServiceUnavailable(f"{problem}: {FIX}")
    folder.mkdir(parents=True, exist_ok=True)
    port, controller = free_port(), free_port()
    sasl_port = free_port() if sasl else None
    properties = PROPERTIES.format(
        port=port, controller=controller, data=folder / "data",
        sasl_listener=f",SASL_SSL://127.0.0.1:{sasl_port}" if sasl else "")
    scram = []
    if sasl:
        properties += SASL_PROPERTIES.format(keystore=sasl.keystore,
                                             password=sasl.keystore_password)
        for name, password in sasl.users.items():
            scram += ["--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]"]
    (folder / "server.properties").write_text(properties)
    (folder / "log4j2.xml").write_text(LOG4J2.format(log=folder / "server.log"))
    # A fixed cluster id: any base64 UUID does for a node of its own.
    formatted = subprocess.run(
        _java(folder, "kafka.tools.StorageTool", "format", "--standalone", "-t",
              "ZQfTc0JhSAqrnm7Cx6ACmw", "-c", str(folder / "server.properties"), *scram),
        capture_output=True, text=True, timeout=120)
    if formatted.returncode != 0:
        raise RuntimeError(f"StorageTool format failed: {formatted.stderr[-2000:]}")
    return _run(folder, port, controller, sasl_port)


def restart(server: KafkaServer) -> KafkaServer:
    """Stops the node and starts it again on its folder and ports, its data kept (topics,
    messages, consumer groups' committed offsets): what clients see of a broker restart.
    `server` is updated in place (its new process), so a fixture's stop still stops it."""
    stop(server)
    server.process = _run(server.folder, server.port, server.controller_port,
                          server.sasl_port).process
    return server


def _run(folder: Path, port: int, controller: int,
         sasl_port: Optional[int] = None) -> KafkaServer:
    with open(folder / "stdout.log", "ab") as out:
        process = subprocess.Popen(_java(folder, "kafka.Kafka", str(folder / "server.properties")),
                                   cwd=folder, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT)
    server = KafkaServer(port, controller, folder, process, sasl_port)
    wait_until_answering(process, lambda: api_versions(port), f"kafka on {server.bootstrap}",
                         lambda: server.log, START_TIMEOUT_S, STOP_TIMEOUT_S, poll_s=0.25)
    return server


def create_topic(server: KafkaServer, name: str, partitions: int = 1, **config: str) -> None:
    """Creates a topic (replication factor 1, the node's only broker) with topic configs, e.g.
    `**{"max.message.bytes": "2097152"}`; returns once the broker created it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)],
                                  operation_timeout=30, request_timeout=30)
    futures[name].result(timeout=60)


def stop(server: KafkaServer) -> None:
    """Stops the node (SIGTERM: a controlled shutdown), then kills it; nothing is left behind."""
    stop_process(server.process, STOP_TIMEOUT_S)

