"""Every copy of the environment in the vector env is seeded with the same seed.

Form: code bug. A vector env's copies need a seed each (gymnasium and SB3 give copy i the seed
``seed + i``); an env factory that seeds every copy with one value, or copies made from one
seeded env, gives them one random stream: every copy draws the same start state at each of its
resets, so the batch holds N copies of one sequence of start states instead of N independent
ones. The policy's sampled actions still differ between copies, so the trajectories part after
the first steps: what the bug removes is diversity of start states, which a task with a narrow
start distribution (CartPole's +-0.05) barely feels. The seeds are set where the envs are built,
so the bug exists from the start only (a later onset is refused). It runs on SB3, whose DummyVecEnv
holds one env object per copy, as in the reports; the native trainers run CartPole through
gymnasium's natively vectorised env, which draws every copy's start state from one generator (no
per-copy seed exists there), so the fault is SB3's here. No signature describes lost
start-state diversity; the expected one, ``return_falls``, is the trace a user would watch for (a
hypothesis the catalogue tests, expected to be refuted where start states barely matter).

Provenance (read): hill-a/stable-baselines#79 ("observations are identical in SubprocVecEnv after
.reset()"; the maintainer: "The environments need to be seeded with a different random seed for
each process, otherwise, you will get the same observation for all processes");
Farama-Foundation/Minigrid#173 (an AsyncVectorEnv of one env factory: "for all the environments,
the agents have the same starting location"; the answer: "you would need to supply a different
seed to each environment"); Farama-Foundation/SuperSuit#89 ("if someone creates a vector
environment, they need to call seed() before using it, otherwise all the environments are the
same").
"""

from dataclasses import dataclass

from faults.base import Fault


@dataclass
class EnvsSeededAlike(Fault):
    name = "envs_seeded_alike"
    description = ("every env of the vector env gets the same seed: each copy draws the same start state at each "
                   "of its resets (less start-state diversity per batch)")
    provenance = ("stable-baselines#79 (identical observations after reset: 'The environments need to be seeded with "
                  "a different random seed for each process'); Minigrid#173 (all envs start at the same location); "
                  "SuperSuit#89 ('otherwise all the environments are the same')")
    algos = ("ppo",)

    def refusal(self, backend: str) -> str | None:
        if backend == "native":
            return ("the native trainers step gymnasium's natively vectorised env, which draws every copy's start "
                    "state from one generator: there is no per-copy seed to get wrong (SB3's DummyVecEnv has one)")
        return None
    expected = ("return_falls",)
    onset_kinds = ("0",)

    def env_seeds(self, seed: int, num_envs: int) -> list[int] | None:
        return [seed] * num_envs
