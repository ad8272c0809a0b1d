"""Speed and learning scripts that print measured ratios (not tests): run each from the repository root as
``python -m perf.<script>`` (docs/speed.md)."""
