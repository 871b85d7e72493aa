"""Errors a user can act on; the CLI prints them without a traceback and exits non-zero."""


class StageError(RuntimeError):
    """A stage failed for a reason the user can fix (bad data, missing input, unreachable server).

    The message must say what failed and how to fix it.
    """
