"""Imported first by the pool's fork server, and by nothing else: it pauses the garbage collector.

The server imports ``base.WARM`` with no collection and makes none while it forks; each worker
freezes what it inherited (``pool._worker``), so its collections never traverse (nor copy) the
server's objects, as Python's documentation for ``gc.freeze`` advises.
"""

import gc

gc.disable()
