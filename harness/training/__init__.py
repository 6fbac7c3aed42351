"""One run: the training and evaluation loop and what it keeps while it runs.

``train`` is the one loop (one config in, one record out); ``checkpoint`` holds a run's
``TrainState`` so a stopped run goes on where it was; ``events`` says what happened while it trained
(overflows, loss spikes, the end of a diverging run); ``tracking`` writes TensorBoard events;
``timing`` times on CPU and CUDA; ``code`` is the code version a record keeps (``method_code``). The
executors (``harness.executors``) call it.
"""
