"""condrnn-harness: a harness for comparing conditional-computation recurrent networks.

One registry of methods, one task interface, one training loop, one record format.

Importing ``harness`` is light: submodules (torch-heavy ones included) load when used.
"""

__version__ = "0.1.0"
