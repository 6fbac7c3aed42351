"""condrnn-harness: one registry of methods, one task interface, one training loop, one record
format, for comparing conditional-computation recurrent networks.

Importing ``harness`` is light: submodules (torch-heavy ones included) load when used.
"""

__version__ = "0.1.0"
