"""CleanRL-style scripts: ``writer = MonitoredSummaryWriter(f"runs/{run_name}")`` in place of
``SummaryWriter(...)`` (a drop-in subclass of torch's), and ``if writer.should_stop: break`` where
the script may stop.

Every ``add_scalar`` goes to TensorBoard as before and to the :class:`~harness.monitor.core.Monitor`
(profile ``cleanrl`` by default); the ``hyperparameters`` text summary CleanRL writes first is read as
the run's configuration, exactly as diagnose reads it from the run directory. A check is due once an
update's scalars are complete: when a step has received every per-update key the previous update
had (episode returns, logged at their own steps during the rollout, do not count). Alarms are
printed and written as ``harness/*`` scalars at the update's step.
"""

from __future__ import annotations

from typing import Any

from torch.utils.tensorboard import SummaryWriter

from harness.logs import load_profile
from harness.logs.readers import text_config
from harness.monitor.core import PREFIX, Alarm, Monitor


class MonitoredSummaryWriter(SummaryWriter):
    """torch's SummaryWriter that also feeds a live monitor; see the module doc. ``profile``,
    ``stop_on`` and ``emit`` as the :class:`Monitor`'s, ``monitor``: its other options (``budget``,
    ``patience``, ``warmup``, ``recent``, ``results_dir`` / ``model``); everything else goes to
    SummaryWriter."""

    def __init__(self, *args: Any, profile: str = "cleanrl", stop_on: str | None = None, emit: Any = print,
                 monitor: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        prof = load_profile(profile)
        self.monitor = Monitor(prof.name, algo=prof.algo, stop_on=stop_on, emit=emit, **(monitor or {}))
        self._per_update = set(prof.columns)          # keys logged once per update (not per episode)
        self._previous: set[str] = set()              # the per-update keys of the last complete update
        self._step: Any = None                        # the step of the update being logged
        self._seen: set[str] = set()
        self._done = True

    def add_text(self, tag: str, text_string: str, *args: Any, **kwargs: Any) -> None:
        super().add_text(tag, text_string, *args, **kwargs)
        config = text_config(text_string)
        if config:
            self.monitor.set_config(config)

    def add_scalar(self, tag: str, scalar_value: Any, global_step: Any = None, *args: Any, **kwargs: Any) -> None:
        super().add_scalar(tag, scalar_value, global_step, *args, **kwargs)
        if tag.startswith(PREFIX):
            return
        self.monitor.scalar(global_step, tag, scalar_value)
        if tag not in self._per_update:
            return
        if global_step != self._step:          # a new update: the one before it is complete
            if not self._done:
                self._update_done()
            self._step, self._seen, self._done = global_step, set(), False
        self._seen.add(tag)
        if not self._done and self._previous and self._seen >= self._previous:
            self._update_done()

    def _update_done(self) -> None:
        """An update's scalars are all in: check when due, and write the monitor's scalars."""
        self._previous, self._done = set(self._seen), True
        self.monitor.check_if_due()
        for key, value in self.monitor.scalars().items():
            super().add_scalar(key, value, self._step)

    @property
    def should_stop(self) -> bool:
        return self.monitor.should_stop

    @property
    def alarms(self) -> list[Alarm]:
        return self.monitor.alarms
