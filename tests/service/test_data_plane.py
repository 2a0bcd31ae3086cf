"""The data plane closed (issue 42, item 6), against real servers: a redis-server on TLS only with
deploy/service/redis-users.acl's users, and one KRaft node with a SASL_SSL listener (SCRAM-SHA-512,
the StandardAuthorizer with the README's KafkaUser ACLs). Keys and certificates are made at test
time (tests/tls_certs.py); passwords are random per run and reach the processes through files, as
a mounted Secret would.

- Redis: the endpoint's user reads a history and is refused every write; the updater's user
  writes histories and is refused any other key; a client without a user, without the CA, or
  trusting another CA, or speaking plain TCP, is refused. The endpoint and the updater, as the
  service runs them, read and write over TLS with their own users.
- Kafka: the updater, as a process, logs in with its SCRAM credentials over TLS, applies clicks,
  dead-letters a bad event and commits, with only the README's ACLs; with a wrong password it
  stops at once with an error that names the user and the config (not a silent retry loop).
- The config refuses what would put a secret in it or a login on a plain connection.
"""
from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
import subprocess
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import redis

from core.click_history import ClickEvent
from core.config import ConfigError
from service.history_store import HistoryStore
from service.logins import kafka_options, redis_options
from service.config import RedisSettings, ServiceConfig, load_service_config
from devtools import redis_node
from service.endpoint.app import create_app
from service.endpoint.history import HistoryReader
from tests.helpers import REPO, dump_yaml, load_yaml
from tests.tls_certs import Certs, make_certs

ACL_FILE = REPO / "deploy" / "service" / "redis-users.acl"
CONFIG = REPO / "configs" / "recommender_service.yaml"
ENDPOINT_USER, UPDATER_USER = "recommend-endpoint", "history-updater"


def render_acl(template: str, passwords: dict) -> str:
    """deploy/service/redis-users.acl with the users' password hashes, as README says to render
    it (envsubst of ENDPOINT_PASSWORD_SHA256 and UPDATER_PASSWORD_SHA256)."""
    values = {f"{role.upper()}_PASSWORD_SHA256": hashlib.sha256(pw.encode()).hexdigest()
              for role, pw in passwords.items()}
    text = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], template)
    assert "$" not in text
    return text


def write_secret(folder: Path, name: str, value: str) -> Path:
    """A password as a mounted Secret's file (kubectl create secret --from-file adds a newline)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(value + "\n")
    path.chmod(0o600)
    return path


class SecureRedis:
    """A TLS-only redis-server with the ACL file's users, and the service config's redis section
    for it (users' passwords in files)."""

    def __init__(self, folder: Path, certs: Certs, acl_template: str = None,
                 auth_clients: str = "optional"):
        self.certs = certs
        self.passwords = {"endpoint": secrets.token_urlsafe(24),
                          "updater": secrets.token_urlsafe(24)}
        folder.mkdir(parents=True, exist_ok=True)
        acl = folder / "users.acl"
        acl.write_text(render_acl(acl_template or ACL_FILE.read_text(), self.passwords))
        self.server = redis_node.start(folder / "redis", tls=redis_node.ServerTLS(
            certs.server_cert, certs.server_key, certs.ca, auth_clients), aclfile=acl)
        secrets_dir = folder / "secrets"
        self.section = {
            "url": self.server.url,
            "endpoint_user": {"username": ENDPOINT_USER, "password_file": str(
                write_secret(secrets_dir, "endpoint", self.passwords["endpoint"]))},
            "updater_user": {"username": UPDATER_USER, "password_file": str(
                write_secret(secrets_dir, "updater", self.passwords["updater"]))},
            "tls": {"ca_file": str(certs.ca)}}

    def settings(self) -> RedisSettings:
        return RedisSettings.model_validate(self.section)

    def client(self, role: str) -> redis.Redis:
        """A client as the service makes it for `role` (service/logins.redis_options)."""
        return redis.Redis.from_url(self.server.url, socket_timeout=5, decode_responses=True,
                                    **redis_options(self.settings(), role))

    def stop(self) -> None:
        redis_node.stop(self.server)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def secure_redis(tmp_path, certs) -> Iterator[SecureRedis]:
    server = SecureRedis(tmp_path / "secure-redis", certs)
    try:
        yield server
    finally:
        server.stop()


def service_with(raw_changes: dict) -> ServiceConfig:
    raw = load_service_config(CONFIG).model_dump()
    for section, values in raw_changes.items():
        raw[section] = {**raw[section], **values} if isinstance(values, dict) else values
    return ServiceConfig.model_validate(raw)


# --------------------------------------------------------------------------------------------
# Redis: ACL users and TLS


def test_the_updaters_user_writes_histories_and_nothing_else(secure_redis):
    service = service_with({"redis": secure_redis.section})
    store = HistoryStore.from_service_config(secure_redis.client("updater"), service)
    assert store.apply(ClickEvent("e1", "u1", "sku1001", 1_700_000_000_000)) is True
    assert store.history("u1") == ["sku1001"]
    updater = secure_redis.client("updater")
    # The same script on a key outside history:*: refused by the ACL, inside Redis.
    foreign = HistoryStore(updater, service.history_spec(), ttl_s=60, prefix="session:")
    with pytest.raises(redis.exceptions.NoPermissionError, match="keys"):
        foreign.apply(ClickEvent("e2", "u1", "sku1001", 1_700_000_000_000))
    for command in (("SET", "history:u1", "x"), ("DEL", "history:u1"), ("KEYS", "*"),
                    ("FLUSHALL",), ("CONFIG", "GET", "*"), ("ZADD", "other:u1", "1", "a")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            updater.execute_command(*command)
    assert store.history("u1") == ["sku1001"]


def test_the_endpoints_user_reads_a_history_and_every_write_is_refused(secure_redis):
    service = service_with({"redis": secure_redis.section})
    HistoryStore.from_service_config(secure_redis.client("updater"), service).apply(
        ClickEvent("e1", "u1", "sku1001", 1_700_000_000_000))
    endpoint = secure_redis.client("endpoint")
    assert endpoint.zrange("history:u1", 0, -1) == ["sku1001"]
    for command in (("ZADD", "history:u1", "2", "sku1002"), ("DEL", "history:u1"),
                    ("PEXPIRE", "history:u1", "1"), ("EVAL", "return 1", "0"),
                    ("ZRANGE", "other:u1", "0", "-1"), ("SCAN", "0"), ("FLUSHALL",)):
        with pytest.raises(redis.exceptions.NoPermissionError):
            endpoint.execute_command(*command)
    # The Lua script the updater runs is refused to the endpoint's user too.
    with pytest.raises(redis.exceptions.NoPermissionError):
        HistoryStore.from_service_config(endpoint, service).apply(
            ClickEvent("e2", "u1", "sku1002", 1_700_000_000_001))
    assert endpoint.zrange("history:u1", 0, -1) == ["sku1001"]


def test_a_client_without_the_user_or_the_ca_is_refused(secure_redis, certs):
    url, ca = secure_redis.server.url, str(certs.ca)
    # No user: the default user is off.
    anonymous = redis.Redis.from_url(url, ssl_ca_certs=ca, socket_timeout=5)
    with pytest.raises(redis.exceptions.AuthenticationError, match="NOAUTH|Authentication"):
        anonymous.zrange("history:u1", 0, -1)
    wrong = redis.Redis.from_url(url, ssl_ca_certs=ca, username=UPDATER_USER,
                                 password="not-the-password", socket_timeout=5)
    with pytest.raises(redis.exceptions.AuthenticationError):
        wrong.ping()
    # The right user, but a client that does not trust the server's CA (the system's, another).
    login = {"username": UPDATER_USER, "password": secure_redis.passwords["updater"]}
    for trusted in (None, str(certs.other_ca)):
        untrusting = redis.Redis.from_url(url, ssl_ca_certs=trusted, ssl_cert_reqs="required",
                                          socket_timeout=5, **login)
        with pytest.raises(redis.exceptions.ConnectionError, match="certificate verify failed"):
            untrusting.ping()
    # Plain TCP to the TLS port: no answer a client could use.
    plain = redis.Redis(host="127.0.0.1", port=secure_redis.server.port, socket_timeout=2,
                        **login)
    with pytest.raises(redis.exceptions.ConnectionError):
        plain.ping()
    # A host name the certificate does not name (it names 127.0.0.1 only) fails the host name
    # check the service turns on (redis-py's default is off).
    other_name = secure_redis.section | {"url": url.replace("127.0.0.1", "localhost")}
    with pytest.raises(redis.exceptions.ConnectionError, match="match"):
        redis.Redis.from_url(other_name["url"], socket_timeout=5, **redis_options(
            RedisSettings.model_validate(other_name), "updater")).ping()


def test_the_endpoint_reads_histories_over_tls_as_its_own_user(tmp_path, secure_redis):
    """The endpoint app as it serves (create_app, its lifespan's HistoryReader): a user's stored
    history reaches retrieve, read over TLS as the endpoint's user."""
    from devtools.tf_serving.rest_stub import RestStub
    from tests.service.endpoint_env import (V1_ITEMS, canned_retrieve, served,
                                            service_config, write_version)

    store = HistoryStore.from_service_config(secure_redis.client("updater"),
                                             service_with({"redis": secure_redis.section}))
    store.apply(ClickEvent("e1", "u1", "sku1003", 1_700_000_000_000))
    write_version(tmp_path / "models", 1, V1_ITEMS)
    with RestStub("recommender", canned_retrieve(V1_ITEMS), versions=[1]) as stub:
        plain = service_config(tmp_path, secure_redis.server.url, stub.url)
        # A read budget a first TLS handshake on a busy machine fits in (the test is not timed).
        redis_settings = secure_redis.settings().model_copy(update={"timeout_ms": 1000})
        service = plain.model_copy(update={"redis": redis_settings})
        with served(create_app(service)) as url:
            answer = httpx.post(f"{url}/v1/recommend", json={"user_id": "u1", "k": 4}, timeout=10)
        assert answer.status_code == 200, answer.text
        assert answer.json()["history"] == "redis", answer.text
        (request,) = stub.received
        assert "sku1003" in request["instances"][0]["user_click_history"]


def test_a_client_certificate_from_the_config_passes_mutual_tls(tmp_path, certs):
    """A Redis that asks every client for a certificate (tls-auth-clients yes): the updater's
    client with redis.tls.cert_file and key_file is let in; without them, refused."""
    server = SecureRedis(tmp_path / "mutual", certs, auth_clients="yes")
    try:
        with_cert = server.section | {"tls": {"ca_file": str(certs.ca),
                                              "cert_file": str(certs.client_cert),
                                              "key_file": str(certs.client_key)}}
        client = redis.Redis.from_url(server.server.url, socket_timeout=5, **redis_options(
            RedisSettings.model_validate(with_cert), "updater"))
        assert client.zadd("history:u1", {"sku1001": 1}) == 1
        with pytest.raises(redis.exceptions.ConnectionError):
            server.client("updater").zrange("history:u1", 0, -1)
    finally:
        server.stop()


def test_a_rotated_password_is_read_on_the_next_connection(tmp_path, certs):
    """The Secret rotated (the file rewritten, Redis told the new password): the endpoint's
    reader, as the endpoint makes it, logs in with the new one on its next connection, no restart;
    a password Redis refuses is the fallback (None), never an exception out of read()."""
    admin_password = secrets.token_urlsafe(24)
    template = ACL_FILE.read_text() + f"user admin on >{admin_password} ~* &* +@all\n"
    server = SecureRedis(tmp_path / "rotating", certs, template)
    try:
        admin = redis.Redis.from_url(server.server.url, ssl_ca_certs=str(certs.ca),
                                     username="admin", password=admin_password,
                                     decode_responses=True, socket_timeout=5)
        admin.zadd("history:u1", {"sku1001": 1})
        secret = Path(server.section["endpoint_user"]["password_file"])

        def rotate(new: str, tell_redis: bool = True) -> None:
            if tell_redis:
                admin.acl_setuser(ENDPOINT_USER, enabled=True, reset_passwords=True,
                                  passwords=[f"+{new}"])
            secret.write_text(new + "\n")
            admin.execute_command("CLIENT", "KILL", "USER", ENDPOINT_USER)

        async def reads():
            reader = HistoryReader(server.server.url, 1000, "history:",
                                   **redis_options(server.settings(), "endpoint"))
            async def after_kill():
                # The pooled connection Redis killed fails one read (no retries: the budget);
                # the next read opens a new connection and logs in again.
                return [await reader.read("u1") for _ in range(3)]

            try:
                first = await reader.read("u1")
                rotate(secrets.token_urlsafe(24))
                second = await after_kill()
                rotate("not-the-password", tell_redis=False)
                return first, second, await after_kill()
            finally:
                await reader.close()

        first, second, refused = asyncio.run(reads())
        assert first == ["sku1001"] and second[1:] == [["sku1001"]] * 2, second
        assert refused == [None] * 3
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# The config: where a password may be, and which connections may carry it


def _config_error(tmp_path: Path, edit) -> str:
    raw = load_yaml(CONFIG.read_text())
    raw["pipeline_config"] = str(CONFIG.parent / raw["pipeline_config"])
    raw["catalog"]["path"] = str((CONFIG.parent / raw["catalog"]["path"]).resolve())
    edit(raw)
    path = tmp_path / "service.yaml"
    path.write_text(dump_yaml(raw))
    with pytest.raises(ConfigError) as caught:
        load_service_config(path)
    return str(caught.value)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["redis"].update(url="redis://:hunter2@redis:6379/0"),
     "redis: Value error, the URL holds credentials"),
    (lambda r: r["redis"].update(tls={"ca_file": "ca.pem"}),
     "redis: Value error, tls is set but the URL is redis:// (unencrypted): use rediss://"),
    (lambda r: r["redis"].update(updater_user={"username": "u", "password": "hunter2"}),
     "redis.updater_user.password: unknown key"),
    (lambda r: r["redis"].update(updater_user={"username": "u", "password_file": "a",
                                               "password_env": "B"}),
     "set exactly one of password_file"),
    (lambda r: r["kafka"].update(security_protocol="SASL_PLAINTEXT"),
     "kafka.security_protocol: Input should be 'PLAINTEXT', 'SSL' or 'SASL_SSL'"),
    (lambda r: r["kafka"].update(security_protocol="SASL_SSL"),
     "security_protocol SASL_SSL needs kafka.sasl"),
    (lambda r: r["kafka"].update(sasl={"username": "u", "password_env": "P"}),
     "kafka.sasl is set but security_protocol is PLAINTEXT"),
    (lambda r: r["kafka"].update(security_protocol="SASL_SSL", sasl={
        "username": "u", "password_env": "P", "mechanism": "PLAIN"}),
     "kafka.sasl.mechanism: Input should be 'SCRAM-SHA-512' or 'SCRAM-SHA-256'"),
], ids=["redis-url-password", "tls-without-rediss", "literal-password", "two-sources",
        "sasl-plaintext", "sasl-without-login", "login-without-sasl", "sasl-plain"])
def test_the_config_refuses_a_secret_in_it_or_a_login_in_the_clear(tmp_path, edit, message):
    assert message in _config_error(tmp_path, edit)


def test_a_missing_password_names_the_key_and_the_file(tmp_path, monkeypatch):
    service = service_with({"redis": {"url": "rediss://redis:6379/0", "endpoint_user": {
        "username": ENDPOINT_USER, "password_file": str(tmp_path / "absent")}}})
    with pytest.raises(ConfigError, match=r"redis.endpoint_user.password_file: cannot read "
                                          r".*absent .*mount the Secret"):
        redis_options(service.redis, "endpoint")
    # The endpoint's start stops on it (python -m service.endpoint exits 2 with this message).
    with pytest.raises(ConfigError, match="redis.endpoint_user.password_file"):
        create_app(service)
    monkeypatch.delenv("KAFKA_PW", raising=False)
    kafka = service_with({"kafka": {"security_protocol": "SASL_SSL", "sasl": {
        "username": UPDATER_USER, "password_env": "KAFKA_PW"}}}).kafka
    with pytest.raises(ConfigError, match="kafka.sasl.password_env: the environment variable "
                                          "KAFKA_PW is unset"):
        kafka_options(kafka)
    monkeypatch.setenv("KAFKA_PW", "pw")
    assert kafka_options(kafka) | {"sasl.password": "x"} == {
        "bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": UPDATER_USER, "sasl.password": "x",
        "ssl.endpoint.identification.algorithm": "https"}
    assert kafka_options(kafka)["sasl.password"] == "pw"


# --------------------------------------------------------------------------------------------
# Kafka: the updater's SCRAM login over TLS, with only the README's ACLs


def readme_user_acls(readme: str, user: str) -> list:
    """The README's KafkaUser `user` as confluent-kafka AclBindings (Strimzi's simple
    authorization: each operation on each resource, allowed from any host)."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)

    from tests.deploy.test_service_artifacts import readme_kafka_objects

    (spec,) = [d["spec"] for d in readme_kafka_objects(readme)
               if d["kind"] == "KafkaUser" and d["metadata"]["name"] == user]
    assert spec["authentication"]["type"] == "scram-sha-512"
    return [AclBinding(ResourceType[acl["resource"]["type"].upper()], acl["resource"]["name"],
                       ResourcePatternType[acl["resource"]["patternType"].upper()],
                       f"User:{user}", "*", AclOperation[operation.upper()],
                       AclPermissionType.ALLOW)
            for acl in spec["authorization"]["acls"] for operation in acl["operations"]]


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory, certs):
    """One KRaft node with a SASL_SSL listener and the updater's SCRAM user, its topics (the
    config's names) and the README's ACLs for that user; (server, password)."""
    from confluent_kafka.admin import AdminClient

    from devtools import kafka_node

    password = secrets.token_urlsafe(24)
    server = kafka_node.start(tmp_path_factory.mktemp("sasl-kafka"), sasl=kafka_node.SaslSsl(
        certs.keystore, certs.keystore_password, {UPDATER_USER: password}))
    try:
        kafka = load_service_config(CONFIG).kafka
        kafka_node.create_topic(server, kafka.topic, 1)
        kafka_node.create_topic(server, kafka.dead_letter_topic, 1)
        # The tests' admin is the PLAINTEXT listener's anonymous super user.
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        acls = readme_user_acls((REPO / "deploy" / "service" / "README.md").read_text(),
                                UPDATER_USER)
        for future in admin.create_acls(acls).values():
            future.result(timeout=30)
        yield server, password
    finally:
        kafka_node.stop(server)


def updater_kafka(certs: Certs, folder: Path, password: str, ca: Path = None) -> dict:
    return {"security_protocol": "SASL_SSL",
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": UPDATER_USER,
                     "password_file": str(write_secret(folder, "kafka-password", password))},
            "tls": {"ca_file": str(ca or certs.ca)}}


@pytest.mark.slow
def test_the_updater_logs_in_over_tls_consumes_dead_letters_and_commits(tmp_path, sasl_kafka,
                                                                        secure_redis, certs):
    """The whole data plane closed: the updater process reads Kafka as its SCRAM user over TLS
    (only the README's ACLs) and writes Redis as its ACL user over TLS."""
    from tests.service import updater_harness as h

    server, password = sasl_kafka
    kafka = load_service_config(CONFIG).kafka
    events = [ClickEvent(f"e{n}", f"u{n % 2}", f"sku{1000 + n}", 1_700_000_000_000 + n)
              for n in range(4)]
    h.produce(server, kafka.topic, [*events[:2], b"not json", *events[2:]])
    config = h.write_config(tmp_path, {"topic": kafka.topic, **updater_kafka(
        certs, tmp_path / "secrets", password)}, redis=secure_redis.section)
    updater = h.Updater(config, server, secure_redis.server.url, tmp_path / "updater.log",
                        bootstrap=server.sasl_bootstrap)
    try:
        reader = secure_redis.client("endpoint")
        h.wait_until(lambda: reader.zrange("history:u0", 0, -1) == ["sku1000", "sku1002"]
                     and reader.zrange("history:u1", 0, -1) == ["sku1001", "sku1003"],
                     "both histories in Redis")
        h.wait_until(lambda: h.committed(server, kafka.group_id, kafka.topic) == [5],
                     "the offsets committed")
        (letter,) = h.read_all(server, kafka.dead_letter_topic, 1)
        assert (letter["kind"], letter["offset"]) == ("json", 2)
    finally:
        assert updater.terminate() == 0, updater.log[-3000:]
    assert "refused" not in updater.log


@pytest.mark.slow
@pytest.mark.parametrize("wrong", ["password", "ca"])
def test_a_refused_login_stops_the_updater_naming_user_and_config(tmp_path, sasl_kafka,
                                                                 secure_redis, certs, wrong):
    from service.updater import REFUSED_EXIT
    from tests.service import updater_harness as h

    server, password = sasl_kafka
    kafka = load_service_config(CONFIG).kafka
    settings = updater_kafka(certs, tmp_path / "secrets", "wrong-password" if wrong == "password"
                             else password, certs.other_ca if wrong == "ca" else None)
    config = h.write_config(tmp_path, {"topic": kafka.topic, "group_id": f"g-{wrong}",
                                       **settings}, redis=secure_redis.section)
    updater = h.Updater(config, server, secure_redis.server.url, tmp_path / "updater.log",
                        bootstrap=server.sasl_bootstrap, wait=False)
    try:
        status = updater.wait_exit(60)
    except subprocess.TimeoutExpired:
        updater.process.kill()
        updater.process.wait()
        raise AssertionError(f"the updater did not stop:\n{updater.log[-3000:]}") from None
    assert status == REFUSED_EXIT, updater.log[-3000:]
    (line,) = [x for x in updater.log.splitlines() if "ERROR service.updater" in x]
    assert (f"kafka: the brokers refused the login of user '{UPDATER_USER}' (SCRAM-SHA-512, "
            f"password from {tmp_path / 'secrets' / 'kafka-password'})") in line, line
    assert {"password": "Authentication failed during authentication due to invalid "
                        "credentials with SASL mechanism SCRAM-SHA-512",
            "ca": "certificate verify failed"}[wrong] in line, line
    assert f"Check kafka.sasl and kafka.tls in {config}" in line, line
    assert password not in updater.log
    assert h.committed(server, f"g-{wrong}", kafka.topic) == [-1001]
