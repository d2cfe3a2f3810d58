"""The Fault base class: a named, parameterised override of some agent hooks."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, ClassVar

from harness.config import ConfigError, check_range
from harness.hooks import HEALTHY, Hooks
from harness.hooks import acts_on as hook_sites

#: how a fault shows up as a user meets it (docs/design.md, "Faults"):
#: - misconfigured: the user's config holds the bad value, so the configured hyperparameters a
#:   detector sees and the logged value agree;
#: - overridden: the config says one thing and the code silently uses another;
#: - code bug: a hook changes what the update computes; config and logged values are untouched.
FORMS = ("misconfigured", "overridden", "code bug")
#: where the bad value lives in each form (what ``fault.form`` chooses)
FORM_MEANING = {"misconfigured": "the bad value is in the config",
                "overridden": "the config keeps the intended value, the update replaces it",
                "code bug": "a hook changes what the update computes, the config is untouched"}


def param(default: Any, doc: str, **bounds: Any) -> Any:
    """A fault parameter with its default, a one-line doc and validated bounds
    (``gt``, ``ge``, ``lt``, ``le``; ``kind`` defaults to float; ``choices`` for strings)."""
    return field(default=default, metadata={"doc": doc, "bounds": bounds})


def form_param(default: str, *choices: str) -> Any:
    """The ``form`` parameter of a fault that users meet in more than one form."""
    assert default in choices and all(c in FORMS for c in choices)
    meaning = "; ".join(f"{c}: {FORM_MEANING[c]}" for c in choices)
    return param(default, f"how the bug shows up: {' | '.join(choices)} (default: the most common real form; "
                 f"{meaning})", kind=str, choices=choices)


@dataclass
class Fault(Hooks):
    """Base of every fault. Subclasses are dataclasses whose fields are the parameters."""

    onset: int = param(0, "update index at which the fault switches on (0 = from the start)",
                       ge=0, kind=int)

    name: ClassVar[str] = ""
    #: the version of this fault's code: part of its runs' identity (with harness.TRAINING_VERSION for the
    #: training code), so changing how a fault acts retrains its runs alone. Bump it with any such change.
    version: ClassVar[int] = 1
    description: ClassVar[str] = ""
    #: the real reports it mimics, with the symptom they quote; or "synthetic: <why plausible>"
    provenance: ClassVar[str] = ""
    #: its form (FORMS); a fault met in several forms has a ``form`` parameter instead
    form: ClassVar[str] = "code bug"
    #: "training" (the run is broken) or "telemetry" (training is healthy, a logged metric is wrong)
    kind: ClassVar[str] = "training"
    #: where it acts, computed from the hooks the class overrides (harness.hooks.acts_on), e.g.
    #: "effective hyperparameter: hyperparams; update-loop hook: old_logprob"; never set by hand
    acts_on: ClassVar[str] = "nothing"
    algos: ClassVar[tuple[str, ...]] = ("ppo", "grpo")
    # (the backends that can run it are derived from their trainers: harness.agents.base.backends_of)
    #: the expected signature (a hypothesis the catalogue tests); the first is the primary one
    expected: ClassVar[tuple[str, ...]] = ()
    #: why no signature is expected, for a bug its reports found invisible in the logs (``expected`` empty)
    no_trace_expected: ClassVar[str] = ""
    #: the bug exists only where a separate rollout engine (vLLM, SGLang) generates the completions, so a
    #: framework that logs the engine's metrics only with one (TRL: ``use_vllm``) always logs them with it
    needs_rollout_engine: ClassVar[bool] = False
    #: the onsets at which the bug can exist: "0" (from the start) and "mid" (switched on mid-run). A bug
    #: of a resume exists mid-run only (at onset 0 nothing changes); one of how the envs are built exists
    #: from the start only (a later onset is refused). The sweeps draw only these.
    onset_kinds: ClassVar[tuple[str, ...]] = ("0", "mid")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "acts_on" in vars(cls):
            raise TypeError(f"{cls.__qualname__}.acts_on is computed from the hooks it overrides; "
                            "say anything more precise in its description")
        cls.acts_on = hook_sites(cls)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The config ``fault=<name>`` composes: ``_target_``, then every parameter at its default, in
        the order the classes declare them (onset first). Part of a run's identity: do not reorder."""
        cfg: dict[str, Any] = {"_target_": f"{cls.__module__}.{cls.__qualname__}"}
        params = {f.name: f for f in fields(cls)}
        for klass in reversed(cls.__mro__):
            if "__dataclass_fields__" not in vars(klass):
                continue
            own = {f.name for f in fields(klass)}        # a ClassVar (Fault.form) is no field
            for name in inspect.get_annotations(klass):
                if name in own and name not in cfg:
                    cfg[name] = params[name].default
        missing = [name for name, value in cfg.items() if value is MISSING]
        if missing or len(cfg) != len(params) + 1:
            raise TypeError(f"fault {cls.name or cls.__qualname__}: every parameter needs a default "
                            f"(param(default, doc)); missing: {', '.join(missing or sorted(set(params) - set(cfg)))}")
        return cfg

    def __post_init__(self) -> None:
        for f in fields(self):
            bounds = dict(f.metadata.get("bounds", {}))
            kind = bounds.pop("kind", float)
            choices = bounds.pop("choices", None)
            value = getattr(self, f.name)
            if choices is not None:
                if value not in choices:
                    raise ConfigError(f"fault.{f.name}={value!r}; valid choices: {', '.join(map(str, choices))}")
            else:
                check_range("fault", f.name, value, kind=kind, **bounds)
        if self.onset > 0 and "mid" not in self.onset_kinds:
            raise ConfigError(f"fault.onset={self.onset}: {self.name} acts where the run starts (onset 0 only)")
        self.active = False

    @classmethod
    def forms(cls) -> tuple[str, ...]:
        """The forms this fault can take (the ``form`` parameter's choices, or its one form)."""
        f = next((f for f in fields(cls) if f.name == "form"), None)
        return tuple(f.metadata["bounds"]["choices"]) if f is not None else (cls.form,)

    def refusal(self, backend: str) -> str | None:
        """Why ``backend`` cannot run this fault as configured (e.g. a form that lives inside SB3's
        PPO.train()), beyond the hooks it overrides (the backend's trainer checks those); None when
        it can."""
        return None

    def inert(self, configured: Mapping[str, Any]) -> str | None:
        """Why this fault changes nothing a run computes or logs under the configured hyperparameters
        ``configured`` (a mapping, as meta.json holds them), or None when it acts. Such a run is its
        healthy twin under the fault's name; the dataset labels it ``inert`` (harness.analysis.labels)."""
        return None

    def setting(self, algo: str = "") -> dict[str, Any]:
        """Hyperparameters the configuration must hold for the bug to exist at all (gradient
        accumulation for a bug in its scaling, a warmup for a scheduler that steps late): the run is
        configured with them from update 0, and so is its healthy twin (same base configuration).
        ``algo``: the algorithm's name, for a bug whose setting differs between algorithms (empty: the
        fault's first algorithm)."""
        return {}

    def configure(self, algo: Any) -> Any:
        """The algorithm config with this fault's setting applied (validated); raises ConfigError."""
        setting = self.setting(algo.name)
        if not setting:
            return algo
        unknown = sorted(k for k in setting if not hasattr(algo, k))
        if unknown:
            raise ConfigError(f"fault {self.name} needs algo.{unknown[0]}, which algo={algo.name} does not have")
        configured = replace(algo, **setting)
        configured.validate()
        return configured

    def user_config(self, configured: Any) -> Any:
        """The hyperparameters as the user's config holds them, which is what a detector is shown.

        A misconfigured fault puts its bad value in the config itself (from update 0; a later
        onset models a run that was started healthy and changed its value mid-run, so its config
        shows the start value). Overridden faults and code bugs leave the config as it was."""
        if self.form == "misconfigured" and self.onset == 0:
            return self.hyperparams(configured)
        return configured

    def begin_update(self, update: int, configured: Any) -> tuple[Hooks, Any]:
        """Switch on from the onset update; the hooks and hyperparameters in force for this update."""
        self.active = update >= self.onset
        hooks = self if self.active else HEALTHY
        return hooks, hooks.hyperparams(configured)

    def params(self) -> dict[str, Any]:
        """The fault's own parameters (everything but onset; ``form`` included where it is one)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "onset"}

    @classmethod
    def param_docs(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("doc", "") for f in fields(cls)}

    def check_applicable(self, algo: str) -> None:
        """Whether the bug exists in ``algo``; whether a backend can run it is its trainer's to say."""
        if algo not in self.algos:
            raise ConfigError(f"fault {self.name} does not apply to algo={algo}; it applies to: "
                              f"{', '.join(self.algos)}")
