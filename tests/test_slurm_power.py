"""The Slurm test cluster's SuspendProgram (no cluster: its nodes' stop is replaced here)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from testcluster import slurm_power


def test_suspend_powers_a_batch_of_nodes_off_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # one after another, each node's stop (up to 3 s) delayed the next: the last of 20 went off,
    # and was billed, a minute after the first. Each stop here waits for all the others to
    # have begun: done one at a time, the first never returns and the barrier breaks
    nodes = [f"c{i}" for i in range(1, 6)]
    (tmp_path / "power.json").write_text(json.dumps({"state": str(tmp_path)}))
    monkeypatch.setattr(slurm_power, "CONF", tmp_path / "slurm.conf")
    monkeypatch.setattr(slurm_power, "hostnames", lambda hostlist: nodes)
    together = threading.Barrier(len(nodes), timeout=10)
    broken: list[str] = []

    def stop(node: str, state: Path) -> None:
        try:
            together.wait()
        except threading.BrokenBarrierError:
            broken.append(node)

    monkeypatch.setattr(slurm_power, "stop", stop)
    slurm_power.suspend("c[1-5]")
    assert not broken
    offs = [line.split() for line in (tmp_path / "power.log").read_text().splitlines()]
    assert sorted(node for _, what, node in offs if what == "off") == nodes
