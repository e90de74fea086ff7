"""Errors that reach the user as one clear line and exit code 2, never a traceback."""


class UserError(Exception):
    """Bad input from the user (missing file, malformed dataset, unknown db_id, ...)."""
