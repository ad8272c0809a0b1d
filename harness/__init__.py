"""The harness: one rollout-and-update engine for interchangeable credit-assignment methods (docs/ARCHITECTURE.md).
Importing it wires the plug-in registries to the packages that fill them (harness/plugins.py)."""
from harness import plugins as _plugins

_plugins.install()
