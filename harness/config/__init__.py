"""Configuration: the typed schema of every Hydra group, the one error type, what identifies a run,
what a detector may see of a config, and how reports name a setup.

- :mod:`~harness.config.errors`: :class:`ConfigError` (a one-line message for the user), range checks,
  ``_target_`` lookup, the unknown-name messages with their "did you mean";
- :mod:`~harness.config.schemas`: the structured configs (``harness/conf/<group>/*.yaml`` extend them);
- :mod:`~harness.config.experiment`: a validated :class:`Experiment` and its run identity;
- :mod:`~harness.config.visibility`: the configured hyperparameters a detector is shown, the run's opaque id;
- :mod:`~harness.config.labels`: ``algo[_variant]/env/backend`` as every report writes it;
- :mod:`~harness.config.targets`: :func:`instantiate`, how a trainer, a fault and a detector are built
  from their ``_target_``.

Everything is importable from ``harness.config``.
"""

from harness.config.errors import (
    INTERRUPTED,
    ConfigError,
    check_range,
    did_you_mean,
    locate,
    unknown_choice,
    unknown_key,
)
from harness.config.experiment import Experiment
from harness.config.labels import algo_label, setup_label
from harness.config.schemas import (
    ALGO_SCHEMAS,
    GRPO_MODELS,
    GRPO_SCALES,
    IS_CORRECTIONS,
    KL_ESTIMATORS,
    LOSS_AGGS,
    LR_DECAYS,
    SAMPLER_PRECISIONS,
    BackendConfig,
    Config,
    EnvConfig,
    GRPOConfig,
    ModelConfig,
    PPOConfig,
    backend_config,
    conf_dir,
    group_choices,
    register_configs,
    to_object,
)
from harness.config.targets import instantiate
from harness.config.visibility import HIDDEN, opaque_id, visible_config

#: the Hydra config directory (config.yaml and one folder per config group)
CONF_DIR = conf_dir()

__all__ = ["ALGO_SCHEMAS", "CONF_DIR", "INTERRUPTED", "GRPO_MODELS", "GRPO_SCALES", "HIDDEN", "IS_CORRECTIONS",
           "KL_ESTIMATORS", "LOSS_AGGS", "LR_DECAYS", "SAMPLER_PRECISIONS", "BackendConfig", "Config", "ConfigError", "EnvConfig",
           "Experiment", "GRPOConfig", "ModelConfig", "PPOConfig", "algo_label", "backend_config", "check_range", "did_you_mean",
           "group_choices", "instantiate", "locate", "opaque_id", "register_configs", "setup_label", "to_object", "unknown_choice", "unknown_key", "visible_config"]
