"""The commands run in-process, as a shell would run them: ``run("harness.diagnose", "log=x.csv")``.

Each command's ``main(argv)`` runs in this process with its output captured, so a test pays for the
command's work and not for a new interpreter importing torch and Hydra (about 4 s each). What a process
would show is kept: the exit code (``SystemExit``; an uncaught exception is exit 1 with its traceback on
stderr), stdout and stderr. Tests of what only a separate process shows (signals, a fresh interpreter,
the installed wheel) start one themselves.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import traceback
from dataclasses import dataclass

from hydra.core.global_hydra import GlobalHydra

#: ``python -m X`` -> the module whose ``main(argv)`` is the command
COMMANDS = {"harness": "harness.commands.run", "harness.diagnose": "harness.commands.diagnose",
            "harness.evaluate": "harness.commands.evaluate", "harness.export": "harness.commands.export",
            "harness.catalogue": "harness.commands.catalogue", "harness.watch": "harness.commands.watch"}


@contextlib.contextmanager
def working_dir(path: str | os.PathLike | None):
    """``contextlib.chdir`` (Python >= 3.11), for the package's Python 3.10 too."""
    old = os.getcwd()
    os.chdir(path or old)
    try:
        yield
    finally:
        os.chdir(old)


@dataclass
class Ran:
    """What a finished command left: like ``subprocess.CompletedProcess``."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)                    # sys.exit("message"): printed, exit 1
    return 1


def run(module: str, *args: str | os.PathLike, cwd: str | os.PathLike | None = None) -> Ran:
    """Run ``python -m <module> <args>`` in this process and return its exit code and output."""
    main = importlib.import_module(COMMANDS[module]).main
    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), working_dir(cwd):
        try:
            main(argv)
        except SystemExit as exc:
            code = _code(exc)
        except Exception:                                  # what the interpreter prints, and its exit code
            traceback.print_exc()
            code = 1
        finally:
            GlobalHydra.instance().clear()
    return Ran([module, *argv], code, out.getvalue(), err.getvalue())
