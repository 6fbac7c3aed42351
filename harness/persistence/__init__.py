"""Persistence, the bottom layer: what is kept on disk and how it is kept safe.

A run's record (``records``: the schema, JSON lines, checks, migration; ``trace``: its packed
update pattern), the append-only store of records (``store``) and the claims of the sweeps that
share one (``claims``), where a command may write (``outputs``) and the file-system facts and the
one atomic write beneath them (``files``). It imports nothing of the harness but ``errors``: no
config, no data, no registry.
"""
