"""Hugging Face TRL / transformers: ``HarnessTrainerCallback.attach(trainer)`` (or
``callbacks=[HarnessTrainerCallback()]``) on a GRPOTrainer, or any Trainer that logs the same keys.

Each ``on_log`` call is one row of the :class:`~harness.monitor.core.Monitor` with the ``trl``
profile, at the trainer's global step: exactly the entry ``trainer_state.json``'s log_history gets.
The run's hyperparameters are read as diagnose reads them beside a checkpoint: the
TrainingArguments (``args.to_dict()``, GRPOConfig's fields included) and the TrainerState's scalars.
Alarms are printed; added to the logged values under ``harness/`` (so TensorBoard / W&B show them)
when the callback runs before the reporting callbacks, which :meth:`HarnessTrainerCallback.attach`
arranges; with ``stop_on=`` training stops cleanly (``control.should_training_stop``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import TrainerCallback

from harness.monitor.core import Alarm, Monitor


def trainer_config(args: Any, state: Any) -> dict[str, Any]:
    """What diagnose reads beside a checkpoint: the TrainerState's scalars and the TrainingArguments'."""
    config = {k: v for k, v in dataclasses.asdict(state).items()
              if k != "log_history" and not isinstance(v, (list, dict))}
    config.update({k: v for k, v in args.to_dict().items() if not isinstance(v, (list, dict))})
    return config


class HarnessTrainerCallback(TrainerCallback):
    """Watches a GRPOTrainer run with the diagnosis; see the module doc and
    :class:`harness.monitor.sb3.HarnessMonitor` for the options."""

    def __init__(self, stop_on: str | None = None, emit: Any = print, **options: Any) -> None:
        self.monitor = Monitor("trl", algo="grpo", stop_on=stop_on, emit=emit, **options)

    @classmethod
    def attach(cls, trainer: Any, **options: Any) -> HarnessTrainerCallback:
        """A monitor placed before the trainer's reporting callbacks, so its ``harness/`` values are
        logged with the trainer's own."""
        callback = cls(**options)
        trainer.callback_handler.callbacks.insert(0, callback)
        return callback

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.set_config(trainer_config(args, state))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs:
            return
        self.monitor.log(state.global_step, logs)
        logs.update(self.monitor.scalars())
        if self.monitor.should_stop:
            control.should_training_stop = True

    @property
    def alarms(self) -> list[Alarm]:
        return self.monitor.alarms
