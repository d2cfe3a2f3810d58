"""The commands: each module is one ``python -m harness[.X]`` entry point (a Hydra app), installed as a console
script too (``rlfh``, ``rlfh-diagnose``, ``rlfh-evaluate``, ``rlfh-export``, ``rlfh-catalogue``: pyproject.toml).

Nothing in the library imports this package; the ``python -m`` shims (``harness/__main__.py``,
``harness/diagnose.py``...) only call a command's ``main()``.
"""
