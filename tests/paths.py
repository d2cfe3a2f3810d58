"""Where things are: the repository, the tests and their data (test files live in subject folders)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
