"""Planning a sweep: from what was asked for to the configs an executor runs.

``spec``: what to run -> every run's config, checked up front; ``suites``: sweep files and the
shipped suites; ``sweep``: grids, the up-front model check, estimates, match-skip; ``resume``:
what a store already holds and what is left to run.
"""
