"""Errors a user can fix (bad flags, bad files, unreachable services). The CLI prints them as one
line and exits with status 2, never with a traceback."""


class UserError(Exception):
    """An error caused by input or configuration, with a message that says how to fix it."""
