"""What a component is: the registry, the protocols, and the run configs they are built from.

Every plug-in (a method, a task, a reference predictor, a metric, an executor, a selection rule)
is registered under a kebab-case name in its kind's registry (``registry``). Here are the
protocols the built-in and plugged-in components satisfy (``method``, ``task``, ``metrics``,
``selection``), the frozen run configs and their knobs (``config``, ``knobs``), the generic model
a method runs in (``model``) and the cost model (``flops``). The components themselves live in
``baselines/``, ``tasks/``, ``harness.references`` and ``harness.executors``; the checks a new
method must pass are ``harness.authoring``'s.
"""
