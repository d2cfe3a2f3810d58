"""Next-step autoreset handled as same-step autoreset: the phantom reset step is trained on.

Gymnasium >= 1.0 vector envs reset a finished sub-env on the *next* step, which ignores the action
and returns the first observation of the new episode with reward 0 (Gymnasium PR#785: "in cases
where terminated=True there is technically a dead action that does nothing"; Gymnasium#1103:
``final_observation`` removed "an intentional change in Gymnasium v1.0"). Code written for the old
same-step API keeps every step as a transition, so each episode end adds one transition from the
final observation, with an action that did nothing, reward 0, and a bootstrap from the reset
observation. Reports (read): CleanRL#499 ("after updating the Gymnasium to 1.0 ... doesn't work
anymore"; a user's write-up of the new autoreset starts "Being careless about this small change
wa[s] ..."); envpool#194 (next-step
autoreset: "I believe quite strongly that this will introduce off by one errors ... in almost all
Deep RL frameworks").

Native: the loop trains on the reset steps it would otherwise mask. SB3: SB3 assumes same-step
autoreset, so the mismatch is an env adapter outside Monitor with next-step semantics (the episode
end is reported, SB3's immediate ``reset()`` gets the final observation back, the next ``step()``
ignores the action and resets), as a next-step vector env wrapped for SB3 behaves. Episode rows
(returns, lengths) come from the monitor and stay the env's own.
"""

from dataclasses import dataclass

from faults.base import Fault


@dataclass
class AutoresetMisuse(Fault):
    name = "autoreset_misuse"
    description = ("gymnasium's next-step autoreset handled as same-step: the phantom reset step (action ignored, "
                   "reward 0) becomes a transition, is trained on and bootstraps from the reset observation (SB3: a "
                   "next-step-autoreset env adapter outside Monitor)")
    provenance = ("CleanRL#499 (scripts \"doesn't work anymore\" after Gymnasium 1.0); Gymnasium#1103 and PR#785 "
                  "(next-step autoreset: \"a dead action that does nothing\"); envpool#194 (\"will introduce off by "
                  "one errors ... in almost all Deep RL frameworks\")")
    algos = ("ppo",)
    expected = ('reward_diluted',)

    def assumes_same_step_autoreset(self) -> bool:
        return True
