"""``python -m harness.evaluate detector=NAME``: the command lives in :mod:`harness.commands.evaluate`.

From Python, ``from harness.evaluate import evaluate`` scores a detector against labelled runs
(:mod:`harness.detection.scoring`)."""

from harness.detection.scoring import Evaluation, evaluate, load_dataset

__all__ = ["Evaluation", "evaluate", "load_dataset"]

if __name__ == "__main__":
    from harness.commands.evaluate import main

    main()
