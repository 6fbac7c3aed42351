"""Errors the CLI turns into one clear line and exit code 2 (bad input), never a traceback."""


class HarnessError(Exception):
    """Bad input or a missing resource: shown to the user as one line, exit code 2."""


class ConfigError(HarnessError):
    """An unknown, ill-typed or out-of-range configuration value."""


class DataError(HarnessError):
    """A dataset file that is missing, unreadable or corrupt."""


class RecordError(HarnessError):
    """A results store that cannot be read or written."""


class DivergedError(RuntimeError):
    """Training produced a non-finite loss or gradient norm.

    The run is recorded as failed, with the epochs it finished, and the sweep goes on.

    Args:
        message: what went non-finite, and where.
        history: the history rows of the epochs finished before it (``train_model``'s).
        train_s: the training seconds spent until then.
    """

    def __init__(
        self, message: str, history: list[dict] | None = None, train_s: float | None = None
    ) -> None:
        super().__init__(message)
        self.history = history or []
        self.train_s = train_s


class Interrupted(KeyboardInterrupt):
    """A sweep stopped by a signal (SIGTERM, ...): exit code 128 + the signal's number.

    Args:
        signum: the signal received.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
