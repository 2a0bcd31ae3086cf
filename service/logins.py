"""How the service's processes log in to Redis and Kafka (issue 42, item 6), TF-free.

The service config (service/config.py) names *where* a password is, never the password: a
file (a mounted Kubernetes Secret) or an environment variable, read when the process starts, so
that the config file and the ConfigMap hold nothing secret. Each process reads only its own
login: the endpoint `redis.endpoint_user`, the updater `redis.updater_user` and `kafka.sasl`.

- Redis: ACL users (Redis 6+; deploy/service/redis-users.acl gives the endpoint's user ZRANGE on
  `history:*` and nothing else, the updater's its script's commands on `history:*`), and TLS with
  a `rediss://` URL: the server's certificate verified against `tls.ca_file` (the system's CAs
  without one), its host name checked; a client certificate for servers that ask for one.
- Kafka: `security_protocol` SASL_SSL (SCRAM over TLS) or SSL (TLS, optionally mutual); PLAINTEXT
  for a broker on loopback only. SASL_PLAINTEXT is refused: a login on an unencrypted connection.

    redis.Redis.from_url(settings.url, **redis_options(settings.redis, "updater"))
    Consumer({**kafka_options(settings.kafka), "group.id": ...})
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.config import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Login(_Section):
    """A user name and where its password is: `password_file` (a mounted Secret's key) or
    `password_env` (an environment variable, e.g. from a Secret's secretKeyRef), one of them."""
    username: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$")
    password_file: Optional[Path] = None
    password_env: Optional[str] = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.password_file is None) == (self.password_env is None):
            raise ValueError("set exactly one of password_file (a mounted Secret) and "
                             "password_env (an environment variable); never the password itself")
        return self

    def password(self, key: str) -> str:
        """The password, read now; ConfigError naming the config key and the source."""
        if self.password_env is not None:
            value = os.environ.get(self.password_env)
            if not value:
                raise ConfigError(f"{key}.password_env: the environment variable "
                                  f"{self.password_env} is unset or empty: set it (a Secret's "
                                  "secretKeyRef) or use password_file")
            return value
        try:
            # A file written by `kubectl create secret --from-file` may end in a newline.
            value = self.password_file.read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{key}.password_file: cannot read {self.password_file} "
                              f"({type(e).__name__}: {e.strerror if isinstance(e, OSError) else e})"
                              ": mount the Secret there or fix the path") from None
        if not value:
            raise ConfigError(f"{key}.password_file: {self.password_file} is empty")
        return value


class SecretCredentials:
    """redis-py's credential provider (its get_credentials interface) for a Login: the password
    is read again for every new connection, so a rotated Secret (the kubelet rewrites the mounted
    file) is used from the next connection on, without a restart; connections already logged in
    stay so (Redis keeps them when a password changes). Read once here, so that a missing one
    stops the start."""

    def __init__(self, login: Login, key: str):
        self.login, self.key = login, key
        self.get_credentials()

    def get_credentials(self):
        return self.login.username, self.login.password(self.key)

    async def get_credentials_async(self):
        return self.get_credentials()  # a small file, read once per new connection


class SaslLogin(Login):
    mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256"] = "SCRAM-SHA-512"


class TLSFiles(_Section):
    """PEM files, mounted from Secrets: the CA that signed the server's certificate (None: the
    system's CAs), and a client certificate with its key for a server that asks for one."""
    ca_file: Optional[Path] = None
    cert_file: Optional[Path] = None
    key_file: Optional[Path] = None

    @model_validator(mode="after")
    def _pair(self):
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (a client certificate and its "
                             "private key)")
        return self


# The config keys that hold file paths, resolved against the config file's folder like the others.
PATH_KEYS = tuple(f"{section}.{part}" for section, parts in (
    ("redis", ("tls.ca_file", "tls.cert_file", "tls.key_file", "endpoint_user.password_file",
               "updater_user.password_file")),
    ("kafka", ("tls.ca_file", "tls.cert_file", "tls.key_file", "sasl.password_file")))
    for part in parts)


def check_redis(url: str, tls: Optional[TLSFiles]) -> None:
    """A URL without credentials (they belong in a Secret), TLS settings only with rediss://."""
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    if "@" in rest:
        raise ValueError("the URL holds credentials: remove them and set endpoint_user / "
                         "updater_user with a password_file (a mounted Secret)")
    if tls is not None and not url.startswith("rediss://"):
        raise ValueError("tls is set but the URL is redis:// (unencrypted): use rediss://")


def check_kafka(protocol: str, sasl: Optional[SaslLogin], tls: Optional[TLSFiles]) -> None:
    if protocol == "SASL_SSL" and sasl is None:
        raise ValueError("security_protocol SASL_SSL needs kafka.sasl (username, password_file)")
    if protocol != "SASL_SSL" and sasl is not None:
        raise ValueError(f"kafka.sasl is set but security_protocol is {protocol}: use SASL_SSL "
                         "(a login over TLS)")
    if protocol == "PLAINTEXT" and tls is not None:
        raise ValueError("kafka.tls is set but security_protocol is PLAINTEXT: use SSL or SASL_SSL")


def redis_options(redis, role: Literal["endpoint", "updater"], url: Optional[str] = None) -> dict:
    """redis-py's keyword arguments (Redis.from_url, sync or asyncio) for the role's login and the
    TLS settings of `redis` (a RedisSettings) for `url` (default redis.url); reads the role's
    password now."""
    options: dict = {}
    url = url or redis.url
    login = getattr(redis, f"{role}_user")
    if login is not None:
        # No CLIENT SETINFO on connect (redis-py's default): the user's ACL allows it nothing but
        # its history commands.
        options.update(credential_provider=SecretCredentials(login, f"redis.{role}_user"),
                       lib_name=None, lib_version=None)
    if url.startswith("rediss://"):
        tls = redis.tls or TLSFiles()
        # redis-py checks the certificate but not the host name unless asked.
        options.update(ssl_cert_reqs="required", ssl_check_hostname=True)
        for option, path in (("ssl_ca_certs", tls.ca_file), ("ssl_certfile", tls.cert_file),
                             ("ssl_keyfile", tls.key_file)):
            if path is not None:
                options[option] = str(path)
    return options


def kafka_options(kafka, key: str = "kafka.sasl") -> dict:
    """librdkafka's settings for `kafka` (a KafkaSettings): the bootstrap servers, the security
    protocol, SCRAM login and TLS files; reads the password now. `key`: the config key its
    sasl login came from, named when the password is missing (the endpoint's request log
    passes a copy of the section with its own login, request_log.sasl)."""
    options = {"bootstrap.servers": kafka.bootstrap_servers,
               "security.protocol": kafka.security_protocol}
    if kafka.sasl is not None:
        options.update({"sasl.mechanism": kafka.sasl.mechanism,
                        "sasl.username": kafka.sasl.username,
                        "sasl.password": kafka.sasl.password(key)})
    if kafka.security_protocol != "PLAINTEXT":
        tls = kafka.tls or TLSFiles()
        # The broker's host name is checked against its certificate (librdkafka's default
        # "https"; said here so that a change of default cannot turn it off).
        options["ssl.endpoint.identification.algorithm"] = "https"
        for option, path in (("ssl.ca.location", tls.ca_file),
                             ("ssl.certificate.location", tls.cert_file),
                             ("ssl.key.location", tls.key_file)):
            if path is not None:
                options[option] = str(path)
    return options
