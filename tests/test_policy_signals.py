"""Production gives each policy what the simulator gives it, or refuses to run it.

HPA reads the workers' measured CPU utilisation: on the local backend it is measured
from each worker's process tree (here with real stress-ng tasks), and HPA scales up from
it; where a backend cannot measure it, ``--policy hpa-*`` is refused with one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import run_hta
from hta.policies.base import check_signals, make_policy


def test_a_policy_is_refused_where_its_signal_cannot_be_measured():
    hpa = make_policy("hpa-50")
    with pytest.raises(ValueError, match=r"^policy hpa-50 needs the workers' measured CPU utilisation, which "
                                         r"the k8s backend cannot measure: no metrics API; choose another"):
        check_signals(hpa, "k8s", frozenset(), "no metrics API")
    check_signals(hpa, "local", frozenset({"cpu_utilization"}))  # measured: allowed
    check_signals(make_policy("hta"), "k8s", frozenset())  # needs nothing optional


@pytest.mark.slow
def test_hpa_scales_up_from_measured_cpu_on_local_workers(tmp_path: Path):
    wf = tmp_path / "Makeflow"
    rules = "".join(f"out{i}.txt:\n\tstress-ng --cpu 1 --timeout 12 --quiet && echo done > out{i}.txt\n\n"
                    for i in range(6))
    wf.write_text('CATEGORY="burn"\nCORES=1\n' + rules)
    r = run_hta("makeflow", "--policy", "hpa-50", "--max-workers", "3", "--worker-cores", "1",
                "--provision-delay", "1", str(wf), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    decisions = [json.loads(line) for line in (tmp_path / "Makeflow.scaling.jsonl").read_text().splitlines()
                 if '"decision"' in line]
    measured = [(d, int(m.group(1))) for d in decisions if (m := re.match(r"cpu (\d+)% vs target 50%", d["reason"]))]
    assert measured, [d["reason"] for d in decisions]
    # a busy worker reads well above the 50 % target, and HPA adds workers because of it
    assert any(cpu > 55 and d["add"] > 0 for d, cpu in measured), [(d["reason"], d["add"]) for d, _ in measured]
