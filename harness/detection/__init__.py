"""Training-health detectors: the protocol, and the reference detectors that ship with the harness.

A detector sees one run as a stream::

    detector.reset(run_info)                     # what is known before training: no labels
    alarms = detector.update(update, metrics)    # once per update, in order

``run_info`` holds the run's algorithm, env, backend and *configured* hyperparameters (not
the fault, its onset, or the effective hyperparameters, which would give the bug away);
``metrics`` maps canonical metric names to this update's values (NaN where one does not
apply). Any class with these two methods is a detector; configure it with
``detector._target_=package.module.Class``.
"""

from harness.detection.base import Alarm, Detector, RunInfo

#: the reference detectors that ship with the harness (harness/conf/detector/<name>.yaml)
REFERENCE = {"folk": "harness.detection.folk.FolkDetector",
             "config_aware": "harness.detection.config_aware.ConfigAwareDetector",
             "ptt": "harness.detection.ptt.PostTrainingToolkitDetector",
             "learned": "harness.detection.learned.LearnedDetector"}

__all__ = ["REFERENCE", "Alarm", "Detector", "RunInfo"]
