"""Planning a sweep: from what was asked for to the configs an executor runs.

``spec`` turns a ``SweepSpec`` (what to run) into a ``Sweep`` (every run's config, checked up
front); ``suites`` reads sweep files (``--config``) and the suites shipped in ``tasks/suites/``;
``sweep`` expands a block's grids, checks each model before any run, estimates, and matches Skip %
across methods; ``resume`` says what a store already holds and what is left to run. The configs
go to an executor (``harness.executors``), which runs each through ``harness.training``.
"""
