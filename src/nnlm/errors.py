"""The one exception type users see: the CLI prints its message on one line and exits 2."""


class NnlmError(Exception):
    """A problem with the user's input (files, options, models), reported without a traceback."""
