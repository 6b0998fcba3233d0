"""The one error type users see: a single line, exit code 2, no traceback."""


class UserError(Exception):
    """Bad input (file, key, reason). The CLI prints it as one line and exits with code 2."""

    exit_code = 2
