"""User-facing errors.

Anything a user can cause (bad config, missing files, bad URI, corrupt artifact,
unreachable server) raises a `UserError` subclass whose message says what to do.
The CLI prints it on one line and exits with code 2; bugs stay loud tracebacks.
"""


class UserError(Exception):
    """An error caused by user input; the message must say how to fix it."""


class ConfigError(UserError):
    """Invalid experiment configuration."""


class DataError(UserError):
    """Missing or malformed dataset files."""


class ArtifactError(UserError):
    """A saved artifact is missing, truncated, tampered or from an incompatible version."""


class StorageError(UserError):
    """A storage URI cannot be read or written."""


class TrackingError(UserError):
    """The tracking server cannot be reached or refused a request."""


class DivergedError(UserError):
    """Local training diverged (non-finite parameters): a setting, usually the learning rate, is
    too aggressive for the scene. Raised before the non-finite model is evaluated or saved."""


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM (how Kubernetes stops a pod); raised inside a run so that it ends
    as Ctrl-C does: callbacks see it (the tracking run is marked KILLED), checkpoints stay."""


class Interrupted(Exception):
    """A command stopped by Ctrl-C or SIGTERM: the CLI prints the message in one line and exits
    with `code` (130, 143). Deliberately not a KeyboardInterrupt: typer turns one into a silent
    exit 130 before fedcore's `main` sees it, which lost SIGTERM's 143 and the message."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class GroundTruthAccessError(AttributeError):
    """Raised when method-facing code tries to read ground truth (y_true, noise flags).

    It subclasses AttributeError so `hasattr(view, "y_true")` is False, yet a
    direct read fails loudly: methods must never see ground truth.
    """
