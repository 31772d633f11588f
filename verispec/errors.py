"""User-facing errors: the CLI prints their message on one line and exits with status 2."""


class VerispecError(Exception):
    """Bad input or an unusable file; the message is meant for the user, not a traceback."""
