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


def brief(value: object, chars: int = 40) -> str:
    """``value`` as a short piece of a one-line message: as ``str`` shows it (a tuple as a list)
    when that is at most ``chars`` characters; a longer list as its first items, ``...`` and its
    last item, with its length (``[1, 2, 3, ..., 20] (20 values)``), never cut inside an item (a
    list cut after "12, " reads as a list that ends there); any other text cut, ending in ``...``."""
    if isinstance(value, tuple):
        value = list(value)
    text = str(value)
    if len(text) <= chars:
        return text
    if isinstance(value, list):
        items = [repr(v) for v in value]
        if all(len(item) <= chars // 2 for item in (items[0], items[-1])):
            head = [items[0]]
            for item in items[1:-1]:
                if len(", ".join([*head, item, "...", items[-1]])) + 2 > chars:
                    break
                head.append(item)
            return f"[{', '.join([*head, '...', items[-1]])}] ({len(items)} values)"
    return text[: chars - 3] + "..."


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


# A secret of this many characters, or one that mixes letters and digits, is no word or number
# the run writes: it is hidden wherever it appears, inside any text. Any other (a phrase such as
# "sk-local-secret" that a local server is keyed with) could be one of the run's own words
# ("accuracy"): it is hidden where it stands as a whole token in text that came from elsewhere
# (a server's reply, an error, a traceback), and kept from the run's own files by refusing it
# where it could enter them (an argument that holds it, see llm.backends.openai_compat).
UNMISTAKABLE_CHARS = 32
# Characters that continue a token: a secret inside a longer run of them is part of another word.
_TOKEN_CHARS = r"A-Za-z0-9_\-"


def unmistakable(secret: str) -> bool:
    """Whether ``secret`` can be no word or number of the run's own (:data:`UNMISTAKABLE_CHARS`)."""
    return len(secret) >= UNMISTAKABLE_CHARS or (any(c.isalpha() for c in secret) and any(c.isdigit() for c in secret))


def register_secret(value: str | None) -> None:
    """Never show or write ``value`` if it has at least :data:`MIN_SECRET_CHARS` characters."""
    if value and len(value) >= MIN_SECRET_CHARS:
        _SECRETS.add(value)


def holds_secret(text: str) -> bool:
    """Whether ``text`` holds a registered secret (as :func:`redact_secrets` finds one)."""
    return redact_secrets(text) != text


def redact_secrets(text: str) -> str:
    """``text`` without any registered secret: an unmistakable one wherever it appears (plain
    replacement: cheap on large files), any other where it stands as a whole token."""
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s not in text:
            continue
        if unmistakable(s):
            text = text.replace(s, REDACTED)
        else:
            text = re.sub(rf"(?<![{_TOKEN_CHARS}]){re.escape(s)}(?![{_TOKEN_CHARS}])", REDACTED, text)
    return text


def redact_written(text: str) -> str:
    """``text``, the run's own words about to be written, without any unmistakable registered
    secret (the last line of defence of every state file). A secret that could be one of those
    words is not replaced here, which would rewrite them: it never reaches them (text from a
    server is redacted as it arrives, an argument that holds it is refused)."""
    for s in sorted(_SECRETS, key=len, reverse=True):
        if unmistakable(s) and s in text:
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
