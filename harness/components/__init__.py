"""What a component is: the registry, the protocols, and the run configs they are built from.

The components themselves live in ``baselines/``, ``tasks/``, ``harness.references`` and
``harness.executors``.
"""
