"""What a method's author uses: the checks every method must pass, and a method to start from.

``conformance`` builds, trains and times a method, so this package sits above the run pipeline and
the benchmarks; ``scaffold`` writes a new method and its test from ``templates/``.
"""
