"""condrnn-plugin-example: a method, a task, a metric and a reference predictor for the condrnn
harness, each loaded through an entry point.

The harness loads the entry points of the groups ``condrnn_harness.methods``, ``.tasks``,
``.metrics`` and ``.references`` (``pyproject.toml``), each of which imports one module of this
package: ``example_skip`` registers the method ``example-skip`` (``@register_method``),
``example_mean`` the task ``example-mean`` (``@register_task``), ``metrics`` its measure ``mae``
(``register_metric``) and ``references`` the reference ``ref:example-median``
(``@register_reference``).
"""

__version__ = "0.1.0"
