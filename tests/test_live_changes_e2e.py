"""A real run changed while it runs: `hta set WORKFLOW --max-workers` and a SIGHUP after the
config file changed reach the real `hta makeflow` (real makeflow, local workers), /status
shows each new cap, the scaling log says who changed it, and the run still ends well: a
SIGHUP is not HTA's end, nor its workers'."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
from conftest import HTA, run_hta, wait

pytestmark = pytest.mark.slow


def status(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url + "status", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return None


def test_a_running_workflow_takes_a_new_cap_from_hta_set_and_from_sighup(tmp_path: Path):
    (tmp_path / "Makeflow").write_text(
        "CATEGORY=nap\nCORES=1\n\n" + "".join(f"n{i}.txt:\n\tsleep 3; echo {i} > n{i}.txt\n" for i in range(6)))
    cfg = tmp_path / "hta.yaml"
    cfg.write_text("max-workers: 1\n")
    proc = subprocess.Popen([*HTA, "makeflow", "--config", str(cfg), "--idle-timeout", "60", "Makeflow"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    control = tmp_path / "Makeflow.hta" / "control.json"
    try:
        assert wait(control.exists, 30, every=0.1), "the run wrote its control file"
        url = json.loads(control.read_text())["url"]
        assert wait(lambda: (s := status(url)) and s["decisions"], 30, every=0.1)

        r = run_hta("set", "Makeflow", "--max-workers", "3", cwd=tmp_path, timeout=30)
        assert r.returncode == 0 and r.stdout == "max-workers 1 → 3 (at the run's next decision)\n", r.stderr
        assert wait(lambda: (s := status(url)) and s["cap"]["max_workers"] == 3, 10, every=0.1), \
            "/status shows the new cap within a decision"

        cfg.write_text("max-workers: 2\n")
        proc.send_signal(signal.SIGHUP)
        capped = wait(lambda: (s := status(url)) and s["cap"]["max_workers"] == 2 and s, 10, every=0.1)
        assert capped and capped["cap"]["set_by"] == "SIGHUP"
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "changed: cap 1 → 3 workers (hta set)" in err and "changed: cap 3 → 2 workers (SIGHUP)" in err, err
    records = [json.loads(line) for line in (tmp_path / "Makeflow.scaling.jsonl").read_text().splitlines()]
    reasons = [x["reason"] for x in records if x["kind"] == "decision"]
    assert any(x.startswith("cap 1 → 3 workers (hta set)") for x in reasons), reasons
    assert any(x.startswith("cap 3 → 2 workers (SIGHUP)") for x in reasons), reasons
    end = records[-1]
    assert end["kind"] == "end" and end["exit_code"] == 0 and end["tasks_done"] == 6
    assert not [x for x in records if x["kind"] == "worker" and x["event"] in ("lost", "failed")], \
        "the SIGHUP reached no worker"
    assert not control.exists(), "the control file goes with the run"
