"""stable-baselines3: ``model.learn(..., callback=HarnessMonitor())``.

The callback adds one output format to the model's logger, so it receives every dump exactly as
progress.csv does (``train/*`` of the previous update, ``rollout/*``, ``time/*``, ``train/n_updates``),
and reads the run's hyperparameters as a saved model holds them (the "data" of ``model.save()``:
constants only, the same as diagnose reads from a model zip beside a log). Each dump is one row of the
:class:`~harness.monitor.core.Monitor` with the ``sb3`` profile. Alarms are printed, recorded under
``harness/`` in the model's logger (so they reach TensorBoard / W&B with SB3's own keys), and with
``stop_on=`` training stops at the next env step (``_on_step`` returns False: SB3 ends ``learn()``).
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter

from harness.logs.readers import sb3_data_config
from harness.monitor.core import Alarm, Monitor


def model_config(model: Any) -> dict[str, Any]:
    """The hyperparameters an SB3 model would save (``model.save()``'s "data": its constants)."""
    buffer = io.BytesIO()
    model.save(buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as zf:
        return sb3_data_config(json.loads(zf.read("data")))


class _Feed(KVWriter):
    """An output format of SB3's logger that hands each dump to the monitor."""

    def __init__(self, owner: HarnessMonitor) -> None:
        self.owner = owner

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.owner.dumped(key_values)

    def close(self) -> None:
        pass


class HarnessMonitor(BaseCallback):
    """Watches an SB3 PPO run with the diagnosis; see the module doc. ``stop_on``: a fault name,
    ``unknown`` or ``any`` (None: never stop); ``options``: the :class:`Monitor`'s (``budget``,
    ``patience``, ``warmup``, ``recent``, ``results_dir`` / ``model``)."""

    def __init__(self, stop_on: str | None = None, emit: Any = print, verbose: int = 0, **options: Any) -> None:
        super().__init__(verbose)
        self.monitor = Monitor("sb3", algo="ppo", stop_on=stop_on, emit=emit, **options)
        self._pending: list[Alarm] = []

    def _on_training_start(self) -> None:
        self.monitor.set_config(model_config(self.model))
        if not any(isinstance(f, _Feed) for f in self.model.logger.output_formats):
            self.model.logger.output_formats.append(_Feed(self))

    def dumped(self, key_values: dict[str, Any]) -> None:
        """One dump of SB3's logger: a row for the monitor (checked when due)."""
        self._pending.extend(self.monitor.log(key_values.get("time/iterations"), key_values))

    def _on_rollout_end(self) -> None:
        """Before the next dump: the monitor's own scalars go into SB3's logger."""
        for key, value in self.monitor.scalars().items():
            self.logger.record(key, value)
        if self._pending:
            self.logger.record("harness/alarm", self._pending[-1].answer, exclude=("csv", "json", "tensorboard"))
            self._pending = []

    def _on_step(self) -> bool:
        return not self.monitor.should_stop

    @property
    def alarms(self) -> list[Alarm]:
        return self.monitor.alarms
