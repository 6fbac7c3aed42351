"""What a component is: the registry, the protocols, their configs, and the checks of each.

Every plug-in (a method, a task, a reference predictor, a metric, an executor, a selection rule)
is registered under a kebab-case name in its kind's registry (``registry``). Here are the
protocols the built-in and plugged-in components satisfy (``method``, ``task``, ``metrics``,
``selection``), the frozen run configs and their knobs (``config``, ``knobs``), the generic model
a method runs in (``model``), the cost model (``flops``), and the tools around a component:
``conformance`` (the checks ``harness check`` and the tests run) and ``scaffold`` (``harness new``,
from ``templates/``). The components themselves live in ``baselines/``, ``tasks/``,
``harness.references`` and ``harness.executors``.
"""
