"""One exception type for bad input: the CLI prints its message on one line and exits 2, no traceback."""


class UserError(Exception):
    """Bad input from the user (file, column, recipe key, value). The message names the culprit and the fix."""
