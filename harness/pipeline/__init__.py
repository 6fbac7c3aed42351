"""The run pipeline: from a sweep's specification to one run's record.

``spec`` (what to run, checked up front) and ``suites`` (sweep files) give a ``Sweep``; ``sweep``
expands its blocks and grids, ``resume`` says what is left to run; an executor
(``harness.executors``) hands each config to ``train``, the one training and evaluation loop,
which keeps its state in a ``checkpoint``, reports ``events`` and TensorBoard logs
(``tracking``), and times with the helpers of ``timing``.
"""
