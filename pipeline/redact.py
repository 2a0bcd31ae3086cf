"""What leaves the machine in a chat message or a log line carries no secret and no mention.

`redacted_url` is a webhook URL as it may be printed: scheme, host and port only (a webhook's
path and query are its credential, Slack's `/services/T../B../<secret>`, and userinfo is a
password). `scrub` is a line from a run's journal as it may be posted to a chat: anything that
looks like a secret (a private key, a URL's userinfo, an Authorization header, a bearer token,
`password=`-like pairs, the formats of well-known tokens, long random-looking strings) becomes
`[redacted]`, and chat mentions (`<!channel>`, `<!here>`, `<@U123>`, `@here`) become `[mention]`,
so that a failing run cannot page a whole channel or publish its credentials (issue 42, item 11).
"""
from __future__ import annotations

import re
import urllib.parse

REDACTED = "[redacted]"
MENTION = "[mention]"

# Names whose value is a secret in `name=value`, `name: value`, `"name": "value"`.
_SECRET_NAME = (r"[\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
                r"|private[_-]?key|credential|signature)[\w.-]*")

_SECRETS = [
    # A PEM private key, whole or cut off at the end of the line.
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"),
     REDACTED),
    # A URL's userinfo (scheme://user:password@host).
    (re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@"), r"\1" + REDACTED + "@"),
    # Webhook URLs whose path is the credential.
    (re.compile(r"(?i)\b(https?://(?:hooks\.slack\.com|(?:[\w-]+\.)?discord(?:app)?\.com/api"
                r"/webhooks|[\w.-]*\.webhook\.office\.com|hooks\.zapier\.com))/\S*"),
     r"\1/" + REDACTED),
    # Authorization headers, whatever their scheme.
    (re.compile(r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*)[\"']?(?:(?:bearer|basic|digest"
                r"|token|negotiate)\s+)?[^\s,;\"']+[\"']?"), r"\1" + REDACTED),
    (re.compile(r"(?i)\bbearer\s+[\w.~+/=-]+"), "Bearer " + REDACTED),
    (re.compile(r"(?i)(\b" + _SECRET_NAME + r"[\"']?\s*[:=]\s*)(?:\"[^\"]*\"|'[^']*'|[^\s,;&]+)"),
     r"\1" + REDACTED),
    # Well-known token formats: AWS key ids, Slack, GitHub, GitLab, Google, Stripe, npm; JWTs.
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bxox[abposre]-[\w-]+|\bgh[pousr]_\w{20,}"
                r"|\bgithub_pat_\w+|\bglpat-[\w-]{20,}|\bAIza[\w-]{35}|\b[rsp]k_(?:live|test)_\w+"
                r"|\bnpm_\w{36}|\beyJ[\w-]+\.[\w-]+\.[\w-]*"), REDACTED),
    # Anything else long, unbroken and mixing letters and digits (a key, a token, a hash).
    (re.compile(r"(?<![\w+=-])(?=[\w+=-]*\d)(?=[\w+=-]*[A-Za-z])[\w+=-]{32,}(?![\w+=-])"),
     REDACTED),
]

_MENTIONS = re.compile(r"<[!@][^>]*>|(?i:(?<![\w@])@(?:channel|here|everyone|all|room)\b)")


def scrub(text: str) -> str:
    """`text` without anything that looks like a secret or a chat mention."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return without_mentions(text)


def without_mentions(text: str) -> str:
    """`text` with its chat mentions made `[mention]` (nothing else changed)."""
    return _MENTIONS.sub(MENTION, text)


def redacted_url(url: str) -> str:
    """`url` as it may be printed: scheme://host[:port], then `/<redacted>` for anything more."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return "<a URL, redacted>"
    if not parts.scheme or not host:
        return "<a URL, redacted>"
    shown = f"{parts.scheme}://" + (f"[{host}]" if ":" in host else host)
    shown += f":{port}" if port is not None else ""
    return shown + ("/<redacted>" if parts.path or parts.query or parts.fragment else "")


def without(text: str, url: str) -> str:
    """`text` (an exception's, which may quote the URL or its parts) with the URL's path, query
    and userinfo cut out, then scrubbed."""
    pieces = [url]
    try:
        parts = urllib.parse.urlsplit(url)
        pieces += [parts.netloc, parts.path + ("?" + parts.query if parts.query else ""),
                   parts.query, parts.username or "", parts.password or ""]
    except ValueError:
        pieces += [url.split("://", 1)[-1]]
    for piece in sorted({p for p in pieces if len(p) > 1}, key=len, reverse=True):
        text = text.replace(piece, "<redacted>")
    return scrub(text)
