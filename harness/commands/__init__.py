"""The commands: each module is one ``python -m harness[.X]`` entry point (a Hydra app).

Nothing in the library imports this package; the ``python -m`` shims (``harness/__main__.py``,
``harness/diagnose.py``...) only call a command's ``main()``.
"""
