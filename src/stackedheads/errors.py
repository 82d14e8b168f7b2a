"""The one exception type for mistakes a user can make, and redaction of secrets.

The CLI turns a :class:`UsageError` into a one-line message and exit code 2; anything else
is a bug and keeps its traceback (with secrets redacted).
"""

import re
from urllib.parse import unquote, urlsplit, urlunsplit


class UsageError(ValueError):
    """Bad input from a user: a bad argument, an out-of-range size, a missing file.

    ``fields``: the settings (config fields, arguments) the message names, each in quotes as
    the library spells it (``'few_shot' must be ...``); the command line writes each as the
    flag that sets it (``--few-shot``). Quoted, so that a path or a value in the message that
    happens to be the same word is never taken for it."""

    def __init__(self, message: str = "", fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = tuple(fields)


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
# A credential in a URL's query string: ?api-key=..., &access_token=..., &sig=...
_QUERY_NAME = r"[\w.-]*(?:key|token|secret|password|passwd|pwd|auth|sig|signature|credential)[\w.-]*"
_URL_QUERY = re.compile(rf"(?i)([?&]{_QUERY_NAME}=)[^&#\s\"']+")
# Shorter values are not redacted: "EMPTY" or "none" (placeholders local servers accept) are no
# secrets, and replacing a short word would corrupt ordinary text (and answers).
MIN_SECRET_CHARS = 8


def register_secret(value: str | None) -> None:
    """Never show or write ``value`` if it has at least :data:`MIN_SECRET_CHARS` characters."""
    if value and len(value) >= MIN_SECRET_CHARS:
        _SECRETS.add(value)


def redact_secrets(text: str) -> str:
    """``text`` without any registered secret (plain replacement: cheap on large files)."""
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s in text:
            text = text.replace(s, REDACTED)
    return text


# Said instead of a text that could not be redacted for want of memory (made now: no allocation then).
NO_MEMORY = "out of memory (the message could not be checked for secrets, so it is not shown)\n"


def redact(text: str) -> str:
    """``text`` without any registered secret, Authorization/api-key value or URL password;
    :data:`NO_MEMORY` where memory ran out while redacting (never the unredacted text)."""
    try:
        text = redact_secrets(str(text))
        text = _HEADER.sub(lambda m: (m.group(1) or m.group(2) or m.group(3)) + REDACTED, text)
        text = _URL_QUERY.sub(lambda m: m.group(1) + REDACTED, text)
        return _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    except MemoryError:
        return NO_MEMORY


def public_url(url: str | None) -> str | None:
    """``url`` without credentials (``user:password@``, a key in the query string): the form
    that may be shown or written. The values removed are registered as secrets."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    query = "?" + parts.query
    for m in _URL_QUERY.finditer(query):
        value = m.group(0)[len(m.group(1)):]
        register_secret(value)  # as typed, and as the server receives it
        register_secret(unquote(value))
    parts = parts._replace(query=_URL_QUERY.sub(lambda m: m.group(1) + REDACTED, query)[1:])
    if parts.fragment:  # never sent to a server, so nothing a run needs; "#access_token=..." is a credential
        register_secret(parts.fragment)
        register_secret(unquote(parts.fragment))
        parts = parts._replace(fragment=REDACTED)
    if parts.username is None and parts.password is None:
        return urlunsplit(parts) if query[1:] != parts.query or parts.fragment else url
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
