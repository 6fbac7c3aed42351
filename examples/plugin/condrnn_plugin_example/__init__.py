"""condrnn-plugin-example: one method for the condrnn harness, loaded through an entry point.

The harness loads the entry point ``example-skip`` of the group ``condrnn_harness.methods``
(``pyproject.toml``), which imports ``condrnn_plugin_example.example_skip``: that module
registers the method ``example-skip`` with ``@register_method``.
"""

__version__ = "0.1.0"
