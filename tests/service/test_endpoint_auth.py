"""Who may read what (issue 42, item 5): the endpoint takes the user from a JWT verified
against a JWKS (a file, or a URL served here) or from a gateway's header, never from the body
alone. Forged, expired, wrong-audience, wrong-issuer, `alg: none`, HS256-with-the-public-key and
unknown-key tokens are a 401 with WWW-Authenticate; A's token never yields B's history; no token
is the popularity fallback only. Keys are made here, at test time."""
from __future__ import annotations

import base64
import contextlib
import hmac
import http.server
import json
import threading
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from core.config import ConfigError
from service.config import load_service_config
from tests.redis_server import redis_server  # noqa: F401
from tests.service.endpoint_env import V1_ITEMS, make_env

ISSUER, AUDIENCE = "https://idp.test/", "recommend-endpoint"


class Keys:
    """An RSA and an EC signing key (kids rsa1, ec1) and a stranger's RSA key (not in the
    JWKS)."""

    def __init__(self):
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        self.stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict:
        keys = []
        for kid, key, alg in (("rsa1", self.rsa, "RS256"), ("ec1", self.ec, "ES256")):
            jwk = json.loads(jwt.algorithms.get_default_algorithms()[alg].to_jwk(
                key.public_key()))
            keys.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": keys}

    def token(self, sub="alice", key=None, kid="rsa1", alg="RS256", **claims) -> str:
        now = int(time.time())
        payload = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 300,
                   **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key if key is not None else self.rsa, algorithm=alg,
                          headers={"kid": kid})


@pytest.fixture(scope="module")
def keys():
    return Keys()


def jwt_auth(tmp_path, keys, **more) -> dict:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(keys.jwks()))
    return {"mode": "jwt", "jwks_file": path, "issuer": ISSUER, "audience": AUDIENCE, **more}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def post(env, token=None, headers=None, **body):
    return env.client.post("/v1/recommend", json={"k": 3, **body},
                           headers={**(bearer(token) if token else {}), **(headers or {})})


def hmac_signed(secret: bytes, payload: str) -> str:
    """An HS256 token by hand (PyJWT refuses to sign with a PEM key as the HMAC secret)."""
    signing_input = f"{b64({'alg': 'HS256', 'typ': 'JWT', 'kid': 'rsa1'})}.{payload}"
    mac = hmac.new(secret, signing_input.encode(), "sha256").digest()
    return f"{signing_input}.{jwt.utils.base64url_encode(mac).decode()}"


def bad_tokens(keys: Keys) -> dict:
    now = int(time.time())
    public_pem = keys.rsa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    good = keys.token()
    head, payload, _ = good.split(".")
    return {
        "forged": keys.token(key=keys.stranger),  # signed by a key not in the JWKS, kid rsa1
        "tampered": f"{head}.{b64({'sub': 'bob', 'iss': ISSUER, 'aud': AUDIENCE, 'exp': now + 300})}.{good.split('.')[2]}",  # noqa: E501
        "expired": keys.token(exp=now - 3600, iat=now - 7200),
        "not_yet_valid": keys.token(nbf=now + 3600),
        "no_exp": keys.token(exp=None),
        "wrong_audience": keys.token(aud="another-service"),
        "wrong_issuer": keys.token(iss="https://evil.test/"),
        "alg_none": f"{b64({'alg': 'none', 'typ': 'JWT', 'kid': 'rsa1'})}.{payload}.",
        # The public key (which anyone may have) used as an HMAC secret.
        "hs256_public_key": hmac_signed(public_pem, payload),
        "unknown_kid": keys.token(kid="rotated-away"),
        "bad_subject": keys.token(sub="../etc/passwd"),
        "garbage": "not.a.token",
    }


def test_bad_tokens_are_401_with_a_reason_and_nothing_read(tmp_path, redis_server, keys):  # noqa: F811
    with make_env(tmp_path, redis_server.url, auth=jwt_auth(tmp_path, keys)) as env:
        env.clicks("alice", ["sku1003", "sku1004"])
        env.clicks("bob", ["sku1005"])
        for name, token in bad_tokens(keys).items():
            answer = post(env, token)
            assert answer.status_code == 401, (name, answer.text)
            challenge = answer.headers["WWW-Authenticate"]
            assert challenge.startswith('Bearer error="invalid_token"'), (name, challenge)
            body = answer.json()
            assert body["error"] and "request_id" in body, (name, body)
            # A short reason: no key material, no PyJWT exception text.
            assert "BEGIN" not in answer.text and "Traceback" not in answer.text
            assert len(body["error"]) < 60, (name, body)
        assert answer.headers.get("X-Request-ID")
        # Not the Basic scheme either.
        assert post(env, headers={"Authorization": "Basic YWxpY2U6eA=="}).status_code == 401
        assert env.stub.received == []


def test_a_token_reads_only_its_own_users_history(tmp_path, redis_server, keys):  # noqa: F811
    with make_env(tmp_path, redis_server.url, auth=jwt_auth(tmp_path, keys)) as env:
        env.clicks("alice", ["sku1003", "sku1004"])
        env.clicks("bob", ["sku1020", "sku1021", "sku1022"])
        alice = keys.token("alice")
        answer = post(env, alice)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["history"] == "redis" and body["fallback_reason"] is None
        assert [i["item_id"] for i in body["items"]][:2] == ["sku1004", "sku1003"]
        assert "history_length" not in body
        # The EC key signs as well (the allow-list names ES256).
        assert post(env, keys.token("alice", key=keys.ec, kid="ec1",
                                    alg="ES256")).json()["history"] == "redis"
        # A's token asking for B: refused, and B's history never sent to TF Serving.
        sent = len(env.stub.received)
        answer = post(env, alice, user_id="bob", exclude_seen=True)
        assert answer.status_code == 403 and answer.json()["field"] == "user_id", answer.text
        assert len(env.stub.received) == sent
        # Its own id in the body is fine.
        assert post(env, alice, user_id="alice").json()["history"] == "redis"
        histories = [i["user_click_history"] for r in env.stub.received
                     for i in r["instances"]]
        assert histories and all(set(h) - {""} <= {"sku1003", "sku1004"} for h in histories)


def test_no_token_is_the_fallback_only(tmp_path, redis_server, keys):  # noqa: F811
    with make_env(tmp_path, redis_server.url, auth=jwt_auth(tmp_path, keys)) as env:
        env.clicks("bob", ["sku1000", "sku1001", "sku1002"])
        for body in ({}, {"user_id": "bob"}, {"user_id": "bob", "exclude_seen": True},
                     {"user_id": "bob", "recent_item_ids": ["sku1010"]}):
            answer = post(env, **body)
            assert answer.status_code == 200, answer.text
            got = answer.json()
            assert got["history"] == "fallback" and got["fallback_reason"] == "anonymous", got
            # exclude_seen ignored: bob's items (the most popular three) are still answered.
            assert [i["item_id"] for i in got["items"]] == V1_ITEMS[:3], (body, got)
            assert "history_length" not in got
        assert env.stub.received == []
        from tests.service.endpoint_env import metric
        assert metric(env.admin, "recommend_history_reads_total", result="hit") == 0
        assert metric(env.admin, "recommend_fallbacks_total", reason="anonymous") == 4


class _JWKSHandler(http.server.BaseHTTPRequestHandler):
    document = b"{}"
    served = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).served += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.document)))
        self.end_headers()
        self.wfile.write(self.document)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def jwks_server(document: dict):
    handler = type("Handler", (_JWKSHandler,), {"document": json.dumps(document).encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json", handler
    finally:
        server.shutdown()
        server.server_close()


def test_jwks_from_a_url(tmp_path, redis_server, keys):  # noqa: F811
    with jwks_server(keys.jwks()) as (url, handler):
        auth = {"mode": "jwt", "jwks_url": url, "issuer": ISSUER, "audience": AUDIENCE}
        with make_env(tmp_path, redis_server.url, auth=auth) as env:
            env.clicks("alice", ["sku1003"])
            assert post(env, keys.token("alice")).json()["history"] == "redis"
            assert post(env, keys.token("alice")).json()["history"] == "redis"
            assert post(env, keys.token(key=keys.stranger)).status_code == 401
            assert post(env, keys.token(aud="x")).status_code == 401
            assert handler.served >= 1


def test_gateway_header_names_the_user(tmp_path, redis_server):  # noqa: F811
    auth = {"mode": "gateway", "gateway_header": "X-Authenticated-User"}
    with make_env(tmp_path, redis_server.url, auth=auth) as env:
        env.clicks("alice", ["sku1003"])
        env.clicks("bob", ["sku1020"])
        answer = post(env, headers={"X-Authenticated-User": "alice"}).json()
        assert answer["history"] == "redis"
        assert post(env, headers={"X-Authenticated-User": "alice"},
                    user_id="bob").status_code == 403
        assert post(env, user_id="bob").json()["fallback_reason"] == "anonymous"
        assert post(env, headers={"X-Authenticated-User": "a b"}).status_code == 401


@pytest.mark.parametrize("auth, says", [
    (None, "auth"),
    ({"mode": "jwt", "issuer": ISSUER, "audience": AUDIENCE}, "jwks_file and jwks_url"),
    ({"mode": "jwt", "jwks_url": "https://idp.test/jwks", "audience": AUDIENCE}, "issuer"),
    ({"mode": "jwt", "jwks_url": "https://idp.test/jwks", "issuer": ISSUER,
      "audience": AUDIENCE, "algorithms": ["HS256"]}, "algorithms"),
    ({"mode": "jwt", "jwks_url": "https://idp.test/jwks", "issuer": ISSUER,
      "audience": AUDIENCE, "algorithms": ["none"]}, "algorithms"),
])
def test_auth_config_is_refused_unless_complete(tmp_path, auth, says):
    import yaml

    from tests.helpers import REPO
    raw = yaml.safe_load((REPO / "configs" / "recommender_service.yaml").read_text())
    raw["pipeline_config"] = str(REPO / "configs" / raw["pipeline_config"])
    raw["catalog"]["path"] = str((REPO / "configs" / raw["catalog"]["path"]).resolve())
    raw.pop("auth")
    if auth is not None:
        raw["auth"] = auth
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=says):
        load_service_config(path)


def test_the_cluster_config_authenticates():
    from tests.helpers import REPO
    text = (REPO / "deploy" / "service" / "k8s" / "configmap.yaml").read_text()
    import yaml
    document = yaml.safe_load(text)
    config = yaml.safe_load(next(iter(document["data"].values())))
    assert config["auth"]["mode"] in ("jwt", "gateway"), config["auth"]
