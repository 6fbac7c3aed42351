"""``harness bench``: timing of methods' models per phase and device, and realised speedups."""
