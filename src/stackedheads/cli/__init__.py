"""The ``stackedheads`` command line: thin wrappers that parse, call one library function, print.

Mistakes a user can make end in one line on stderr and exit code 2, never a traceback. The
package imports the library, never the other way round; each module adds its verbs to the one
app (``_app.py``), in the order ``--help`` lists them.
"""

from __future__ import annotations

import sys

import typer
from typer.exceptions import TyperException

from stackedheads.execution.process import set_openmp_policy

# libgomp reads its environment once, when torch loads it, and the verbs' modules import torch:
# the spin policy (stackedheads.execution.process says why) goes in first.
set_openmp_policy()

# isort: off
from stackedheads.cli import llm, maintain, mechanisms, run, tasks, training  # noqa: E402, F401  (they add the verbs)
from stackedheads.cli._app import app, flag_text  # noqa: E402
from stackedheads.errors import UsageError  # noqa: E402
# isort: on

__all__ = ["app", "main"]


# OSError numbers a user can fix by choosing other paths (exit 2); the rest (a full disk, an I/O
# error) are the environment's (exit 1).
_USER_ERRNOS = {"EACCES", "EPERM", "EROFS", "ENOTDIR", "EISDIR", "EEXIST", "ENOENT", "ENAMETOOLONG", "ELOOP"}


def _os_error_line(e: OSError) -> tuple[str, int]:
    import errno as errno_mod

    name = errno_mod.errorcode.get(e.errno or 0, "")
    what = e.strerror or type(e).__name__
    where = f"{e.filename}" + (f" -> {e.filename2}" if e.filename2 else "") if e.filename else ""
    msg = f"{where}: {what}" if where else str(e) or what
    if name in ("ENOSPC", "EDQUOT"):
        msg += " (free some space and re-run: finished work is kept)"
    return msg, 2 if name in _USER_ERRNOS else 1


def main(argv: list[str] | None = None) -> None:
    """Entry point: one-line errors (exit 2 for user mistakes, 1 for the environment); any
    other error is a bug and keeps its traceback. Every line shown is redacted of secrets."""
    from stackedheads.errors import redact
    from stackedheads.llm.backends import BackendError

    def fail(msg: str, code: int) -> None:
        print(f"stackedheads: error: {redact(' '.join(msg.split()))}", file=sys.stderr)
        sys.exit(code)

    try:
        rv = app(args=argv, standalone_mode=False)
    except (UsageError, TyperException) as e:
        # typer vendors click: its usage errors are TyperExceptions with format_message().
        msg = e.format_message() if hasattr(e, "format_message") else flag_text(e)
        if not msg.strip():  # a bare `stackedheads`: typer has already shown the help
            sys.exit(0)
        fail(msg, 2)
    except (typer.Abort, KeyboardInterrupt):
        rv = 130
    except BackendError as e:  # a server or model failed for good, e.g. during `reproduce`
        fail(f"{e} (answered questions are kept; re-run to resume)", 1)
    except OSError as e:
        fail(*_os_error_line(e))
    except Exception:  # a bug: keep the traceback, but never with a secret in it
        import traceback

        sys.stderr.write(redact(traceback.format_exc()))
        sys.exit(1)
    if rv == 130:  # Ctrl-C: typer returns 130 without a word, so say it here
        print("stackedheads: interrupted; run the same command again to resume", file=sys.stderr)
    sys.exit(rv if isinstance(rv, int) else 0)
