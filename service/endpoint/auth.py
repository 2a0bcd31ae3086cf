"""Who is asking (issue 42, item 5): the user a request may read the history of comes from an
authenticated identity, never from the body alone (a body's user_id was a membership oracle).

    auth = Authenticator(service.auth)
    user = await auth.identify(request)   # the user id, None for no credentials, or Unauthorized

auth.mode (service/config.py AuthSettings):
- jwt: `Authorization: Bearer <JWT>` verified by PyJWT against the JWKS (auth.jwks_file, read at
  start, or auth.jwks_url, fetched and cached by jwt.PyJWKClient off the event loop): signature
  by an allow-listed asymmetric algorithm (never none, never HS*: an HS256 token "signed" with
  the public key is refused), iss, aud, exp (required) and nbf within auth.leeway_s; the user is
  the claim auth.user_claim, checked as every outside id (service.ids.check_id).
- gateway: the header auth.gateway_header, set by a gateway that alone can reach the endpoint
  (NetworkPolicy + mTLS, deploy/service/README.md); the value is checked as an id.
- none: the body's user_id, unauthenticated (local development only; the cluster's ConfigMap
  never says it, tests/deploy check it).
A bad credential is a 401 with WWW-Authenticate and a short reason: never the key or PyJWT's text.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import jwt

from service.ids import InvalidId, check_id


class Unauthorized(Exception):
    """A credential was sent and is not good: the answer is a 401 naming `reason`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason

    def headers(self) -> dict:
        return {"WWW-Authenticate": f'Bearer error="invalid_token", '
                                    f'error_description="{self.reason}"'}


class Authenticator:
    def __init__(self, settings):
        self.settings = s = settings
        self.keys = self.client = None
        if s.mode == "jwt":
            if s.jwks_file is not None:
                # A bad file stops the start, naming the key, not the first request.
                try:
                    self.keys = jwt.PyJWKSet.from_json(Path(s.jwks_file).read_text())
                except (OSError, jwt.PyJWKError, ValueError) as e:
                    raise ValueError(f"auth.jwks_file {s.jwks_file}: not a JWKS the endpoint "
                                     f"can read ({type(e).__name__})") from None
            else:
                self.client = jwt.PyJWKClient(s.jwks_url, lifespan=s.jwks_cache_s,
                                              timeout=s.jwks_timeout_s)

    async def identify(self, request) -> Optional[str]:
        s = self.settings
        if s.mode == "none":
            return None
        if s.mode == "gateway":
            value = request.headers.get(s.gateway_header)
            return None if value is None else _user(value)
        header = request.headers.get("authorization")
        if header is None:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("expected Authorization: Bearer <token>")
        return _user((await self._claims(token.strip())).get(s.user_claim))

    async def _claims(self, token: str) -> dict:
        s = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized("malformed token") from None
        if header.get("alg") not in s.algorithms:
            raise Unauthorized("token algorithm not allowed")
        key = await self._key(token, header)
        try:
            return jwt.decode(token, key, algorithms=list(s.algorithms), audience=s.audience,
                              issuer=s.issuer, leeway=s.leeway_s,
                              options={"require": ["exp", "iss", "aud", s.user_claim]})
        except jwt.ExpiredSignatureError:
            raise Unauthorized("token expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("token not yet valid") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("wrong audience") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("wrong issuer") from None
        except jwt.MissingRequiredClaimError as e:
            raise Unauthorized(f"token has no {e.claim} claim") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("bad signature") from None
        except jwt.PyJWTError:
            raise Unauthorized("invalid token") from None

    async def _key(self, token: str, header: dict):
        kid = header.get("kid")
        if self.keys is not None:
            try:
                found = self.keys[kid] if kid is not None else None
            except KeyError:
                found = None
            if found is None:
                raise Unauthorized("unknown key id")
            return found.key
        try:
            # PyJWKClient fetches with urllib, blocking: off the event loop.
            return (await asyncio.to_thread(self.client.get_signing_key_from_jwt, token)).key
        except jwt.PyJWKClientConnectionError:
            raise Unauthorized("signing keys unavailable") from None
        except jwt.PyJWTError:
            raise Unauthorized("unknown key id") from None


def _user(value) -> str:
    try:
        return check_id("user", value)
    except InvalidId:
        raise Unauthorized("the identity is not a user id") from None
