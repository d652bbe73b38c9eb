"""The thesis experiment's replay, small (bench/replay.py --small: k = 50, 5 kwok nodes,
io-bound, hta), so the real-stack experiment and its calibration cannot rot: the real run
completes with byte-correct outputs and no pod left, and the simulator, given what the
run measured, lands near it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_small_replay_runs_for_real_and_the_simulator_follows(tmp_path):
    out = tmp_path / "runs"
    figures = tmp_path / "figures.json"
    # at k = 50 a task lasts ~2.6 s and waste is a few hundred core·s that vary between real
    # runs by tens of %: the bench's own 10 % goal is for the full replay (k = 10); here a
    # failed run fails the bench, and the robust figures are held to 15 %
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "replay.py"), "--small", "--out", str(out),
                        "--json", str(figures), "--max-error", "1000"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = json.loads(figures.read_text())
    assert (run["workload"], run["policy"], run["k"]) == ("io-bound", "hta", 50.0) and not run["problems"]
    assert run["real"]["exit_code"] == 0 and run["real"]["tasks_done"] == 200
    assert run["sim"]["exit_code"] == 0 and run["sim"]["tasks_done"] == 200
    assert len(list(out.glob("io-bound-hta/*.out"))) == 200
    for metric in ("runtime_s", "shortage_core_s", "node_s"):
        real, sim = run["real"][metric] * run["k"], run["sim"][metric]
        assert abs(sim - real) <= 0.15 * real, (metric, real, sim, r.stdout[-2000:])
