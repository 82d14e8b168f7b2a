"""The one exception type for mistakes a user can make.

The CLI turns a :class:`UsageError` into a one-line message and exit code 2; anything else
is a bug and keeps its traceback.
"""


class UsageError(ValueError):
    """Bad input from a user: a bad argument, an out-of-range size, a missing file."""
