"""The one error type for bad input, and what the commands catch.

`UserError` is raised for what the person running a command can fix: a config value, a flag, a
file that is missing or unreadable, a dataset row. The commands (``train``, ``evaluate``,
``serve``, the apps and tools) print it as one ``error:`` line and exit with code 2; any other
exception is a bug and keeps its traceback. It is a ValueError, so code that catches
ValueError (a loader skipping a bad row) still does.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input; the message says which and what was expected, in one line."""


# What a command boundary turns into one line: bad input, and files the input names that are
# not there (open() raises FileNotFoundError, which is no UserError).
USER_ERRORS = (UserError, FileNotFoundError)
