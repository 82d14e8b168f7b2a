"""The one exception type for mistakes a user can make, and redaction of secrets.

The CLI turns a :class:`UsageError` into a one-line message and exit code 2; anything else
is a bug and keeps its traceback (with secrets redacted).
"""

import re
from urllib.parse import urlsplit, urlunsplit


class UsageError(ValueError):
    """Bad input from a user: a bad argument, an out-of-range size, a missing file."""


# --- secrets -------------------------------------------------------------------------------------
# Values a process must never show or write (API keys, passwords in URLs). Whoever reads a secret
# registers it here; every error message, traceback and state file passes through redact().

_SECRETS: set[str] = set()
REDACTED = "***"
# Header echoes from servers: "Authorization: Bearer x", "'api-key': 'x'", "x-api-key=x".
_HEADER = re.compile(
    r"""(?ix)
    (\b(?:proxy-)?authorization\b["']?\s*[:=]\s*["']?(?:bearer|basic|token)?\s*)[^\s"',}\]]+
    | (\b(?:x-)?api[-_]?key\b["']?\s*[:=]\s*["']?)[^\s"',}\]]+
    | (\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}
    """
)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def register_secret(value: str | None) -> None:
    """Never show or write ``value``. Short values ("EMPTY", "none": placeholders local servers
    accept) are no secrets, and replacing them would corrupt ordinary text."""
    if value and len(value) >= 8:
        _SECRETS.add(value)


def redact_secrets(text: str) -> str:
    """``text`` without any registered secret (plain replacement: cheap on large files)."""
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s in text:
            text = text.replace(s, REDACTED)
    return text


def redact(text: str) -> str:
    """``text`` without any registered secret, Authorization/api-key value or URL password."""
    text = redact_secrets(str(text))
    text = _HEADER.sub(lambda m: (m.group(1) or m.group(2) or m.group(3)) + REDACTED, text)
    return _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)


def public_url(url: str | None) -> str | None:
    """``url`` with any ``user:password@`` removed: the form that may be shown or written."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if parts.username is None and parts.password is None:
        return url
    if parts.password:
        register_secret(parts.password)
    elif parts.username and len(parts.username) >= 8:  # https://TOKEN@host: the name is the token
        register_secret(parts.username)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        if parts.port is not None:
            host += f":{parts.port}"
    except ValueError:  # a port that is not a number: leave it to the client to refuse
        pass
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
