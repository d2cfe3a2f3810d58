"""benchmarks/monitor_detection.py: how the monitor's detection, delay and false-alarm figures are
counted, and that the dataset's held-out runs are diagnosed by a model that never saw them."""

from __future__ import annotations

import pytest

from benchmarks import monitor_detection as md
from tests.paths import ROOT

RESULTS = ROOT / "results"
DETECTORS = ["monitor", "folk"]


def test_a_rule_alarm_held_over_consecutive_rows_is_one_event_and_a_new_fault_another():
    hits = [(3, "a"), (4, "a"), (5, "a"), (6, "b"), (9, "b"), (10, "b")]
    assert md.alarm_events(hits) == [(3, "a"), (6, "b"), (9, "b")]
    assert md.alarm_events([]) == []


def _rec(group, fault, onset, rows, monitor, folk, family=None):
    return {"group": group, "family": family or group, "fault": fault, "onset": onset, "rows": rows,
            "monitor": monitor, "folk": folk}


def test_delay_counts_rows_after_the_onset_and_alarms_before_it_are_early_not_detections():
    records = [
        _rec("d, mid", "shared_policy", 10, 40, [(15, True)], [(5, False)], "d"),      # early folk alarm only
        _rec("d, mid", "shared_policy", 20, 40, [(8, False), (30, True)], [(21, False)], "d"),
        _rec("d", "none", 0, 50, [], [(1, True), (30, True)]),
        _rec("d", "none", 0, 50, [(40, True)], []),
    ]
    rows = {r["detector"]: r for r in md.pooled(records, DETECTORS) if r["group"] == "d, mid"}
    mon, folk = rows["monitor"], rows["folk"]
    assert (mon["detected"], mon["named"], mon["delay_detect"], mon["delay_named"]) == (1.0, 1.0, 7.5, 7.5)
    assert mon["before_onset"] == 0.5                    # the second log's alarm at row 8 < onset 20
    assert (folk["detected"], folk["named"], folk["delay_detect"]) == (0.5, 0.0, 1)
    assert folk["before_onset"] == 0.5
    # false alarms come from the family's healthy logs: 1 and 2 alarms over 100 rows
    assert mon["alarms_per_1000"] == pytest.approx(10.0) and mon["any_alarm"] == 0.5
    assert folk["alarms_per_1000"] == pytest.approx(20.0) and folk["any_alarm"] == 0.5
    per_fault = {(r["fault"], r["detector"]): r for r in md.summarise(records, DETECTORS)}
    assert per_fault[("shared_policy", "monitor")]["delay_named"] == 7.5
    assert per_fault[("none", "folk")]["alarms_per_1000"] == pytest.approx(20.0)


def test_markdown_names_every_detector_and_group():
    records = [_rec("sb3", "tiny_clip", 0, 16, [(4, True)], []), _rec("sb3", "none", 0, 16, [], [(2, True)])]
    meta = {"command": "x", "date": "d", "commit": "c", "logs": 2, "seconds": 1, "sources": "s"}
    text = md.markdown(meta, md.pooled(records, DETECTORS), md.summarise(records, DETECTORS), DETECTORS)
    assert "| sb3 | **monitor** | 1 | 100% | 100% | 4 | 4 |" in text
    assert "| sb3 | healthy (false alarms) | 1 | 0.0 / 0% | 62.5 / 100% |" in text


def test_dataset_runs_are_scored_by_a_model_fitted_without_them(diverse_model):
    """On a results_dir's dataset and examples (the tiny ``diverse`` fixture: a dataset sweep with mid-run onsets)."""
    import pandas as pd

    models, held = md.held_out_models(diverse_model)
    logs = md.dataset_logs(diverse_model, held)
    assert {log["algo"] for log in logs} == set(models) == {"ppo", "grpo"}
    examples = pd.read_parquet(diverse_model / "catalogue" / "model" / "examples.parquet", columns=["run_id", "algo"])
    for algo, model in models.items():
        runs = set(examples.loc[examples["algo"] == algo, "run_id"])
        assert held[algo] and held[algo] < runs
        assert model.info["n_runs"] <= len(runs - held[algo])     # never more than the runs not held out
        assert not set(model.info["run_ids"]) & held[algo]         # and none of the held-out ones
    mid = [log for log in logs if log["onset"] > 0]
    assert mid and all(log["fault"] != "none" and log["onset"] < len(log["frame"]) for log in mid)
    # a detector sees only what a monitor on a real run would: metrics and the configuration
    banned = {"fault", "fault_active", "onset", "label", "is_control", "run_id"}
    assert all(not (banned & set(log["frame"].columns)) and not (banned & set(log["config"])) for log in logs)
    rec = md.one_dataset(mid[0], models[mid[0]["algo"]])
    assert rec["rows"] == len(mid[0]["frame"]) and set(rec) >= {"monitor", "folk", "config_aware", "ptt"}


def test_records_saved_by_one_run_are_scored_with_another_s(tmp_path):
    """--save / --load: the dataset scored at one time and the realworld logs at another give the same
    tables as one run over both, and the record names both commands."""
    import json

    dataset = [_rec("d, mid", "shared_policy", 10, 40, [(15, True)], [(5, False)], "d"),
               _rec("d", "none", 0, 50, [(40, True)], [])]
    real = [_rec("sb3", "zero_reward", 0, 30, [(2, True)], []), _rec("sb3", "none", 0, 30, [], [(4, True)])]
    saved = tmp_path / "dataset.json"
    saved.write_text(json.dumps({"realworld": False, "dataset": True, "command": "python x --dataset",
                                 "seconds": 12, "records": dataset}))
    records, sets, commands, seconds = md.with_saved(real, {"realworld": True, "dataset": False}, [saved])
    assert sets == {"realworld": True, "dataset": True} and commands == ["python x --dataset"] and seconds == 12
    assert md.pooled(records, DETECTORS) == md.pooled(real + dataset, DETECTORS)


def test_the_figures_quoted_in_docs_monitor_are_the_recorded_ones():
    import json
    import re

    recorded = json.loads((RESULTS.parent / "benchmarks" / "results" / "monitor_detection.json").read_text())
    pooled = {(r["group"], r["detector"]): r for r in recorded["pooled"]}
    groups = {"dataset PPO, mid-run onset": "dataset ppo, mid-run onset", "dataset GRPO, mid-run onset":
              "dataset grpo, mid-run onset", "SB3 (real)": "sb3", "CleanRL (real)": "cleanrl", "TRL script (real)": "trl (script)",
              "TRL defaults (real)": "trl (defaults)"}
    text = (RESULTS.parent / "docs" / "monitor.md").read_text()
    table = text.split("<!-- monitor figures: from benchmarks/results/monitor_detection.md -->")[1].split("\n\n")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.strip().splitlines()[2:]]
    assert {r[0] for r in rows} == set(groups)
    for name, faulty, detected, named, delay, before, healthy, per_1000 in rows:
        r = pooled[(groups[name], "monitor")]
        assert int(faulty) == r["faulty"] and detected == md._pct(r["detected"]) and named == md._pct(r["named"])
        assert delay == md._num(r["delay_named"]) and before == md._pct(r["before_onset"])
        assert re.fullmatch(rf"{re.escape(md._pct(r['any_alarm']))} of {r['healthy']}", healthy)
        assert per_1000 == f"{r['alarms_per_1000']:.1f}"


def test_scoring_resumes_from_its_journal(tmp_path):
    """An interrupted --save run keeps what it scored (FILE.partial.jsonl, a line per log, a line cut
    short ignored); started again it scores only the rest, and returns every record in order."""
    import json

    journal = tmp_path / "d.partial.jsonl"
    journal.write_text(json.dumps({"key": "b", "record": {"v": 20}}) + "\n" + '{"key": "c", "rec')
    seen = []

    def score(item):
        seen.append(item)
        return {"v": item * 10}

    out = md.scored("test", [1, 2, 3], ["a", "b", "c"], score, 1, journal)
    assert out == [{"v": 10}, {"v": 20}, {"v": 30}] and sorted(seen) == [1, 3]
    lines = journal.read_text().splitlines()
    assert lines[1] == '{"key": "c", "rec'                 # the cut line stays, ignored; each new one is whole
    assert sorted(json.loads(line)["key"] for line in lines[2:]) == ["a", "c"]
    assert md.scored("test", [1, 2, 3], ["a", "b", "c"], score, 1, journal) == out and sorted(seen) == [1, 3]


def test_delay_after_a_break_counts_from_the_row_the_break_is_first_visible():
    logs = [{**_rec("trl", "excessive_lr", 0, 80, [(5, False), (27, True)], []), "proven": True, "break_row": 25},
            {**_rec("trl", "zero_reward", 0, 80, [(3, True)], []), "proven": True, "break_row": 3},
            {**_rec("trl", "shared_policy", 0, 80, [], []), "proven": True, "break_row": 40},     # never alarmed
            {**_rec("trl", "tiny_clip", 0, 80, [(9, True)], []), "proven": True}]                  # an older record
    assert md.after_break(logs, "monitor") == 1.0            # 27 - 25 and 3 - 3
    assert md.after_break(logs[2:], "monitor") is None
    row = next(r for r in md.pooled(logs, DETECTORS) if r["detector"] == "monitor")
    assert row["proven"] == 4 and row["after_break"] == 1.0 and row["delay_proven"] == 5
