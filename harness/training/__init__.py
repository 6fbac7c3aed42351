"""One run: the training and evaluation loop and what it keeps while it runs.

``train`` is the one loop (one config in, one record out); ``checkpoint`` keeps a run's state so a
stopped run goes on; ``events`` says what happened while it trained; ``tracking`` writes
TensorBoard events; ``timing`` times on CPU and CUDA. The executors (``harness.executors``) call it.
"""
