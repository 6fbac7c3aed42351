"""The tasks. Every file is imported here explicitly so that it registers itself."""

from tasks import adding, synthetic  # noqa: F401
