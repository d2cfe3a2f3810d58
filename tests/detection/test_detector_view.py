"""What a detector is handed is what a monitor on a real run would see: no label anywhere.

An adversarial detector reads every string and number it is given (run_info, metric names and
values) and tries to name the fault from them; it must find nothing and name nothing."""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import pytest

from faults import FAULTS
from harness.config import ALGO_SCHEMAS, HIDDEN
from harness.detection import Alarm
from harness.detection.base import RunInfo, opaque_id
from harness.detection.scoring import evaluate
from harness.metrics import CANONICAL

#: words that would only be there if a label leaked (fault names are added below)
LABEL_WORDS = ("control", "single_pass", "variant", "onset", "fault", "healthy", "label", "twin", "inject")


@functools.cache          # the same names and settings come back at every update of every run
def leaks(text: str) -> tuple[str, ...]:
    words = [n for n in FAULTS if n != "none"] + list(LABEL_WORDS)
    return tuple(w for w in words if re.search(re.escape(w), text, re.IGNORECASE))


class Snoop:
    """Reads everything it is handed; names a fault if any handed string mentions one."""

    seen: list[str] = []

    def reset(self, run_info: RunInfo) -> None:
        assert isinstance(run_info, RunInfo)
        self.strings = [str(v) for v in dataclasses.asdict(run_info).values()]
        self.strings += [f"{k}={v}" for k, v in run_info.configured.items()]
        self.strings += [f"{k}={v}" for k, v in run_info.action_space.items()]

    def update(self, update_index, metrics):
        assert set(metrics) == set(CANONICAL), "metric rows hold the canonical metrics only"
        assert all(isinstance(v, float) for v in metrics.values())
        found = [w for s in self.strings + list(metrics) for w in leaks(s)]
        Snoop.seen += found
        return [Alarm("leak", fault=w, score=1.0) for w in found if w in FAULTS]


def test_every_config_field_is_either_shown_to_detectors_or_hidden():
    for name, schema in ALGO_SCHEMAS.items():
        names = {f.name for f in dataclasses.fields(schema)}
        assert set(schema.VISIBLE) | (set(HIDDEN) & names) == names, name
        assert not set(schema.VISIBLE) & set(HIDDEN), name


def test_opaque_id_carries_nothing_of_the_run_id():
    rid = "ppo_single_pass-cartpole-native-shared_policy-s3-0123456789ab"
    oid = opaque_id(rid)
    assert oid == opaque_id(rid) and oid != opaque_id(rid.replace("s3", "s4"))
    assert not leaks(oid) and not set(rid.split("-")) & set(oid.split("-")) - {""}


@pytest.fixture(scope="module")
def labelled(tiny):
    """A labelled dataset of PPO and GRPO runs: faults with parameters (adv_std_no_floor variant=zero_std,
    tiny_clip clip_range=0.001), at onset 0 and mid-run, look-alike controls, and runs that diverged or
    crashed (the tiny catalogue fixture's, tests/make_fixtures.py)."""
    return tiny("catalogue")


def test_a_detector_that_reads_everything_it_is_handed_finds_no_label(labelled):
    Snoop.seen = []
    ev = evaluate(Snoop(), labelled)
    assert Snoop.seen == []
    faulty = ev.runs[ev.runs["fault"] != "none"]
    assert len(faulty) >= 7 and not (faulty["named_fault"] == faulty["fault"]).any()
    assert {"shared_policy", "zero_reward", "tiny_clip", "adv_std_no_floor"} <= set(faulty["fault"])


def test_run_info_is_the_whitelisted_configuration(labelled):
    infos = []

    class Record:
        def reset(self, run_info):
            infos.append(run_info)

        def update(self, update_index, metrics):
            return []

    evaluate(Record(), labelled)
    assert infos and all(i.run_id.startswith("run-") and not leaks(i.run_id) for i in infos)
    for info in infos:
        assert set(info.configured) <= set(ALGO_SCHEMAS[info.algo].VISIBLE)
        assert info.action_space["type"] in ("discrete", "box")
    # every run of an algorithm is shown the same keys: no key's presence marks a fault
    for algo in {i.algo for i in infos}:
        assert len({tuple(sorted(i.configured)) for i in infos if i.algo == algo}) == 1
    # the look-alike control's config is an ordinary one-epoch, one-minibatch config
    assert any(i.configured.get("n_epochs") == 1 and i.configured.get("n_minibatches") == 1 for i in infos)
    assert all(not math.isnan(v) for i in infos for v in i.configured.values() if isinstance(v, float))
