"""The live view of a real run: hta makeflow prints its status URL, serves
/status and /metrics while makeflow runs, `hta status URL` prints the panel, and off a
terminal each decision and worker event is one plain line."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from conftest import HTA, run_hta, wait

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.read().decode()
    except OSError:
        return None


def test_a_running_workflow_can_be_watched(tmp_path: Path):
    wf = tmp_path / "W"
    wf.write_text("CATEGORY=nap\n" + "".join(f"n{i}.txt:\n\tsleep 6; echo {i} > n{i}.txt\n" for i in range(4)))
    port = free_port()
    proc = subprocess.Popen([*HTA, "makeflow", "W", "--status-port", str(port), "--max-workers", "2"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        metrics = wait(lambda: (m := get(url + "metrics")) and 'hta_tasks{category="nap",state="running"}' in m and m,
                       timeout=60)
        assert metrics, "the status server answered while the tasks ran"
        assert "hta_cores{kind=\"supply\"}" in metrics and "hta_preparation_latency_seconds_bucket" in metrics
        shown = run_hta("status", url, timeout=30)
        assert shown.returncode == 0, shown.stderr
        assert "policy hta" in shown.stdout and "nap" in shown.stdout and "workers" in shown.stdout
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    lines = err.strip().splitlines()
    assert lines[0] == f"hta: live status at {url} (also /status, /metrics; or: hta status {url})"
    assert any(line.startswith("hta: t=") and "add 2 workers" in line for line in lines), err
    assert any("worker w1 connected" in line for line in lines), err
    assert get(url + "status") is None, "the server stops with the run"
    gone = run_hta("status", url, timeout=30)
    assert gone.returncode == 1 and gone.stderr.startswith("hta: error: cannot reach")


def test_quiet_says_nothing_but_the_summary(tmp_path: Path):
    (tmp_path / "W").write_text("a.txt:\n\techo a > a.txt\n")
    r = run_hta("makeflow", "-q", "W", cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "HTA run summary" in r.stdout
