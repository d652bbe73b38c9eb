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
    # at k = 50 a task lasts ~2.6 s, so the master's fixed costs weigh 5x more than at k = 10:
    # the test holds the simulator to 25 %, the full replay to 10 %
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "replay.py"), "--small", "--out", str(out),
                        "--json", str(figures), "--max-error", "25"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = json.loads(figures.read_text())
    assert (run["workload"], run["policy"], run["k"]) == ("io-bound", "hta", 50.0) and not run["problems"]
    assert run["real"]["exit_code"] == 0 and run["real"]["tasks_done"] == 200
    assert run["sim"]["exit_code"] == 0 and run["sim"]["tasks_done"] == 200
    assert len(list(out.glob("io-bound-hta/*.out"))) == 200
