"""The tasks. Every file is imported here explicitly so that it registers itself."""

from tasks import (  # noqa: F401
    adding,
    freq_discrimination,
    har,
    ptb,
    seizures,
    synthetic,
    twitter_buzz,
    yahoo,
)
