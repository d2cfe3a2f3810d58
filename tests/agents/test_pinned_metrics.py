"""Refactors change no number: a few short runs' metrics are pinned by a digest of their values.

Each pinned run (native PPO discrete and Gaussian, SB3's PPO, native GRPO on the token task and
on the Gaussian task, TRL's GRPOTrainer) is trained and its per-update and per-optimizer-step
metrics are hashed (:func:`digest`). A change to the training code that alters a metric of a fixed
config shows up here; it is then made on purpose: bump ``harness.TRAINING_VERSION`` (part of every
run's identity, so no store reuses a run the new code would not reproduce) and re-record the pins
(``python -m tests.agents.test_pinned_metrics``), saying why in the commit.

Bit-identity holds only where the float kernels are the same, and torch's CPU capability does not
decide that alone: on two "AVX512" machines (the one that recorded the earlier pins, and an AMD
EPYC whose MKL reports a non-Intel CPU) every pinned run differed from the first update while the
code gave identical digests on either. torch's MKL picks its gemm / gemv kernels by CPU and shape
(on the EPYC, ``MKL_CBWR`` changed every PPO digest; torch's own ATen kernels did not change one
under ``ATEN_CPU_CAPABILITY=avx2``), and the Gaussian GRPO run also depends on numpy's OpenBLAS
core (``OPENBLAS_CORETYPE``). So the pins record a numerics fingerprint (:func:`numerics`): the
library versions and the dispatch decisions they expose (torch's CPU capability, numpy's SIMD
targets found, OpenBLAS's core type, the CPU vendor) and a digest of a probe running the kernels
the runs use (torch linear layers and their gradients at the shapes of the runs' networks, so MKL's
choices show; numpy reductions, transcendental functions and matmuls). Bit-identity is asserted
where the whole fingerprint matches; elsewhere the values must agree to a tolerance that only
kernel rounding explains (runs that sample tokens are skipped there: one flipped token changes
every later number).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from harness import TRAINING_VERSION
from tests.paths import DATA, ROOT

PINS = DATA / "pinned_metrics.json"

#: name -> overrides (each short: a few updates; the token runs start from a short supervised warm-up and
#: the Gaussian one has 4096 dimensions instead of 50,000, which keeps the test in the fast tier)
RUNS: dict[str, list[str]] = {
    "ppo_cartpole_shared_policy": ["fault=shared_policy", "env.total_timesteps=4096", "algo.n_steps=64"],
    "ppo_pendulum_gae_no_done_mask": ["fault=gae_no_done_mask", "env=pendulum", "env.total_timesteps=4096",
                                      "algo.n_steps=64"],
    "sb3_cartpole_tiny_clip": ["fault=tiny_clip", "backend=sb3", "env.total_timesteps=2048", "algo.n_steps=64"],
    "grpo_toyseq_zero_reward": ["algo=grpo", "fault=zero_reward", "fault.onset=2", "env.total_timesteps=3840",
                                "algo.sft_steps=40"],
    "grpo_highdim_none": ["algo=grpo", "env=highdim", "fault=none", "env.total_timesteps=1024",
                          "env.kwargs.dim=4096"],
    "trl_toyseq_shared_policy": ["algo=grpo", "backend=trl", "fault=shared_policy", "env.total_timesteps=2560",
                                 "algo.sft_steps=40"],
}
#: relative tolerance where the numerics differ (kernel rounding, amplified over a few updates)
RTOL = 1e-3

#: runs that sample tokens from a transformer: where the numerics differ, one rounding flip changes a sampled
#: token and every later number (measured: AVX-512 vs AVX2 pins, TRL env_step from the first update; Intel vs
#: AMD EPYC, both AVX-512, native GRPO env_step from the first update)
TOKEN_SAMPLED = {name for name in RUNS if name.startswith(("grpo_toyseq", "trl_toyseq"))}


# ---- the numerics fingerprint ---------------------------------------------------------------------

def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _numpy_simd() -> list[str]:
    """numpy's SIMD dispatch targets found on this CPU (what ``numpy.show_runtime()`` lists as found)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:                                   # numpy < 2
        try:
            from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        except ImportError:
            return ["unknown"]
    return [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]


def _blas() -> list[str]:
    """numpy's BLAS (its wheel's OpenBLAS): API, version and the core type it dispatched to. Only numpy's: which
    other BLAS libraries are loaded depends on what the process imported before (scipy brings its own)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return ["unknown"]
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    home = str(Path(np.__file__).resolve().parent)                  # .../numpy; a wheel's libraries: .../numpy.libs
    mine = [i for i in blas if str(Path(i.get("filepath", "")).resolve()).startswith(home)] or blas
    return sorted(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}" for i in mine)


def probe_torch() -> str:
    """A digest of torch kernels the runs use, on fixed inputs, on one thread as runs train: linear layers and
    their two gradient products at the networks' shapes (MKL picks gemm or gemv kernels by shape and CPU:
    under ``MKL_CBWR`` a linear layer to one output, the value head, changed while wide ones did not),
    attention-like batched products, softmax, reductions and the random draws."""
    h = hashlib.sha256()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)

        def t(*shape):
            return torch.randn(*shape, generator=g, dtype=torch.float32)

        outs = []
        for m in (1, 16, 64, 256, 1024):
            for k in (4, 8, 64):
                for n in (1, 2, 15, 64):
                    a, w, grad = t(m, k), t(n, k), t(m, n)
                    outs += [torch.nn.functional.linear(a, w, t(n)), grad.t() @ a, grad @ w]
        x = t(64, 12, 64)
        outs += [torch.bmm(x, x.transpose(1, 2)), torch.softmax(x, -1), torch.log_softmax(x, -1), x.exp(), x.tanh(),
                 x.sum(), x.mean(), x.var(), x.norm(), x.sum(-1), torch.nn.functional.silu(x), torch.rsqrt(x.abs() + 1),
                 torch.randn(1000, generator=g), torch.rand(1000, generator=g),
                 torch.multinomial(torch.softmax(t(64, 15), -1), 1, generator=g)]
        for out in outs:
            h.update(out.detach().contiguous().numpy().tobytes())
    finally:
        torch.set_num_threads(threads)
    return h.hexdigest()[:16]


def probe_numpy() -> str:
    """A digest of numpy kernels on fixed inputs, float32 and float64: reductions, the transcendental functions
    of the envs' physics and matmuls (OpenBLAS)."""
    h = hashlib.sha256()
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal((1031, 67)).astype(dtype)
        for out in (x.sum(), x.mean(), x.std(), x.var(), x.sum(0), x.mean(1), np.sin(x), np.cos(x), np.exp(x),
                    np.log(np.abs(x) + 1), np.tanh(x), np.sqrt(np.abs(x)), np.arctan2(x, x[::-1]),
                    x @ x.T[:, :64], x.T @ x, x @ x[0], np.linalg.norm(x, axis=1)):
            h.update(np.ascontiguousarray(out).tobytes())
    return h.hexdigest()[:16]


@functools.cache
def numerics() -> dict[str, Any]:
    """What decides the bits of a run's floats on this machine besides the code and the config."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "numpy": np.__version__, "numpy_simd": _numpy_simd(), "blas": _blas(), "cpu_vendor": _cpu_vendor(),
            "machine": platform.machine(), "probe_torch": probe_torch(), "probe_numpy": probe_numpy()}


def numerics_differ(pinned: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{what: (the pins', this machine's)} for each part of the fingerprint that differs."""
    here = numerics()
    return {k: (pinned.get(k), here.get(k)) for k in sorted(set(here) | set(pinned)) if pinned.get(k) != here.get(k)}


# ---- the runs -----------------------------------------------------------------------------------

def frame_digest(frame: pd.DataFrame) -> str:
    """A digest of a frame's values: columns in name order, each as its name, dtype and bytes."""
    h = hashlib.sha256()
    for name in sorted(frame.columns):
        col = frame[name]
        h.update(f"{name}:{col.dtype}".encode())
        if col.dtype.kind in "biuf":
            h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
        else:
            h.update(repr(col.tolist()).encode())
    return h.hexdigest()[:16]


def digest(run_dir: Path) -> dict[str, str]:
    return {name: frame_digest(pd.read_parquet(run_dir / f"{name}.parquet")) for name in ("metrics", "steps")}


def train(overrides: list[str], results_dir: Path) -> Path:
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import get_or_train

    res = get_or_train(make_experiment([*overrides, "twin=false", "progress=false", f"results_dir={results_dir}"]))
    assert res.meta["status"] == "ok", res.meta.get("error")
    return Path(results_dir) / "runs" / res.run_id


def numeric(run_dir: Path) -> dict[str, pd.DataFrame]:
    return {name: pd.read_parquet(run_dir / f"{name}.parquet") for name in ("metrics", "steps")}


def assert_close_to_pins(frames: dict[str, pd.DataFrame], values: dict[str, dict[str, list]], name: str) -> None:
    """The pinned first rows, to a tolerance that kernel rounding explains."""
    for part, expected in values.items():
        frame = frames[part]
        for col, vals in expected.items():
            np.testing.assert_allclose(frame[col].head(len(vals)).to_numpy(dtype=float),
                                       np.array([np.nan if v is None else v for v in vals], dtype=float),
                                       rtol=RTOL, atol=1e-6, equal_nan=True, err_msg=f"{name} {part}.{col}")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_metrics_unchanged(name, store_dir):
    if name.startswith("trl_"):
        pytest.importorskip("trl")
    pins = json.loads(PINS.read_text())
    assert pins["training_version"] == TRAINING_VERSION, "TRAINING_VERSION was bumped: re-record the pins"
    pin = pins["runs"][name]
    assert pin["overrides"] == RUNS[name], "the pinned run's overrides changed: re-record the pins"
    differ = numerics_differ(pins["numerics"])
    if differ and name in TOKEN_SAMPLED:                  # decided before training: nothing to compare
        pytest.skip(f"{name}: sampled completions diverge from the first generation when kernel rounding flips a "
                    f"token; these numerics differ from the pins' (pins', here): {differ}")
    run_dir = train(RUNS[name], store_dir)
    if not differ:
        assert digest(run_dir) == pin["digest"], (
            f"{name}: metrics changed on numerics identical to the pins' ({pins['numerics']}): if on purpose, "
            "bump harness.TRAINING_VERSION and re-pin (python -m tests.agents.test_pinned_metrics)")
        return
    assert_close_to_pins(numeric(run_dir), pin["values"], name)   # other kernels: the same numbers up to rounding


def test_the_tolerance_sees_a_change_rounding_does_not_explain():
    """The comparison used on other numerics fails on a relative change of 1e-2 in one value (a learning rate,
    a coefficient or a formula changed), and passes on float32 rounding of every value."""
    values = {"metrics": {"value_loss": [73.10278615951538, 91.24895486831664, 68.31505069732665],
                          "policy_loss": [1.2e-08, 9.6e-09, None]}}
    frame = pd.DataFrame({"value_loss": values["metrics"]["value_loss"], "policy_loss": [1.2e-8, 9.6e-9, np.nan]})
    rounded = frame.astype(np.float32).astype(float) * (1 + 3e-7)
    assert_close_to_pins({"metrics": rounded}, values, "rounded")
    changed = frame.copy()
    changed.loc[1, "value_loss"] *= 1.01
    with pytest.raises(AssertionError, match="metrics.value_loss"):
        assert_close_to_pins({"metrics": changed}, values, "changed")


@pytest.mark.slow
def test_the_fingerprint_sees_mkl_and_openblas_choose_other_kernels():
    """Each probe sees its library's kernels change: a fresh interpreter with MKL's conditional-reproducibility
    branch set (``MKL_CBWR=COMPATIBLE``: the kernels of an older CPU; it changed every PPO pin) and OpenBLAS's
    core forced (``OPENBLAS_CORETYPE``: it changed the Gaussian GRPO pin) gives other torch and numpy probes.
    A separate process is the point: both libraries read these settings when they load."""
    here = numerics()
    core = "Nehalem" if "Nehalem" not in " ".join(here["blas"]) else "Core2"      # an older core: runs anywhere
    env = {**os.environ, "MKL_CBWR": "COMPATIBLE", "OPENBLAS_CORETYPE": core}
    out = subprocess.run([sys.executable, "-c", "import json, tests.agents.test_pinned_metrics as p; "
                          "print(json.dumps(p.numerics()))"], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    there = json.loads(out.stdout.strip().splitlines()[-1])
    assert core in " ".join(there["blas"]), there["blas"]                      # OpenBLAS took the forced core
    assert there["probe_torch"] != here["probe_torch"] and there["probe_numpy"] != here["probe_numpy"], (here, there)
    assert {k: there[k] for k in ("torch", "cpu_capability", "numpy_simd")} == {
        k: here[k] for k in ("torch", "cpu_capability", "numpy_simd")}


def record(results_dir: Path) -> dict:
    """Train every pinned run and return the pins (the numerics, digests, and the first rows' values)."""
    out = {"training_version": TRAINING_VERSION, "numerics": numerics(), "runs": {}}
    for name, overrides in RUNS.items():
        run_dir = train(overrides, results_dir)
        frames = numeric(run_dir)
        values = {part: {c: [None if not np.isfinite(v) else float(v) for v in f[c].head(3).to_numpy(dtype=float)]
                         for c in f.columns if f[c].dtype.kind in "biuf"} for part, f in frames.items()}
        out["runs"][name] = {"overrides": overrides, "digest": digest(run_dir), "values": values}
        print(name, out["runs"][name]["digest"], file=sys.stderr)
    return out


if __name__ == "__main__":
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        PINS.write_text(json.dumps(record(Path(tmp)), indent=1) + "\n")
    print(f"wrote {PINS}")
