"""Imported first by the pool's fork server, and by nothing else: it pauses the garbage collector.

The server then imports torch, ``torch._dynamo`` and the training code (``base.WARM``), about
half a million objects, with no collection, a third faster (``base.warm_up`` says why), and
makes none while it forks workers. Each worker freezes what it inherited and turns the collector
back on (``pool._worker``): its collections never traverse the server's objects, so neither
spend time on them nor copy their memory pages (Python's documentation for ``gc.freeze``: pause
the collector early in a process that forks without exec, freeze in the children).
"""

import gc

gc.disable()
