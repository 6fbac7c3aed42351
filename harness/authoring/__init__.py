"""What a method's author uses: the checks every method must pass, and a method to start from.

``conformance`` holds the generic checks that the project's tests run over every registered
method and that ``harness check NAME`` runs on one (a plugin's included); they build, train and
time the method, so this package sits above the run pipeline and the benchmarks. ``scaffold``
writes a new method and its test from ``templates/`` (``harness new method``).
"""
