"""Errors that reach the user as one clear line and exit code 2, never a traceback."""


class UserError(Exception):
    """Bad input from the user (missing file, malformed dataset, unknown db_id, ...)."""


class InvalidQuestion(UserError):
    """One question that cannot be asked (empty, too long, not text). In an evaluation it is that
    question's error, not the run's: the other questions are fine."""
