"""`hta worker` says at start what CSS can do where it runs: its futex backend (or none, and
why) and how it pins (one JSON line on stderr, ``{"hta_worker": "css", ...}``). Measured on
the test cluster's real node, an unprivileged pod gets ``backend: proc`` and ``pinned_by:
affinity`` with a read-only cgroup (docs/architecture.md, the node side)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from conftest import HTA

from hta.node.capacity import parse_cpuset
from hta.node.css.daemon import capabilities, cgroup_pinnable
from hta.node.css.monitor import available
from hta.node.launch import last_words

KEYS = {"hta_worker", "backend", "why", "pinned_by", "cgroup_cpuset"}


def start_lines(tmp_path: Path, *flags: str) -> dict[str, dict]:
    """The JSON lines a worker with no master to reach prints as it starts, by kind."""
    w = subprocess.Popen([*HTA, "worker", "--master=127.0.0.1:9", f"--workdir={tmp_path}", "--connect-timeout=5",
                          *flags], stderr=subprocess.PIPE, text=True)
    lines: dict[str, dict] = {}  # (without the line: EOF when the worker gives up, after 5 s)
    try:
        assert w.stderr is not None
        for line in w.stderr:
            if line.startswith('{"hta_worker"'):
                rec = json.loads(line)
                lines[rec["hta_worker"]] = rec
            if "css" in lines:
                break
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(30)
    return lines


def test_hta_worker_says_what_css_can_do_here(tmp_path):
    lines = start_lines(tmp_path)
    assert "capacity" in lines, lines
    css = lines["css"]
    assert set(css) == KEYS
    assert css["backend"] == available()[0]  # the best backend that works here
    assert (css["why"] is None) == (css["backend"] == "perf")  # the backends passed over, and why
    assert css["pinned_by"] == "affinity"  # the daemon pins a worker's tasks (process trees) by affinity
    assert css["cgroup_cpuset"] is cgroup_pinnable()


def test_hta_worker_says_css_is_off_or_only_deciding(tmp_path):
    assert start_lines(tmp_path, "--no-css")["css"] == {"hta_worker": "css", "backend": None, "why": "--no-css",
                                                        "pinned_by": None, "cgroup_cpuset": None}
    dry = start_lines(tmp_path, "--css-dry-run", "--css-backend=proc")["css"]
    assert dry["backend"] == "proc" and dry["pinned_by"] == "dry-run"


def test_a_backend_that_does_not_work_is_named_with_why(monkeypatch):
    from hta.node.css import monitor

    def refuse():
        raise OSError("needs root")

    monkeypatch.setitem(monitor.BACKENDS, "perf", refuse)
    monkeypatch.setitem(monitor.BACKENDS, "bpftrace", refuse)
    m, said = capabilities("perf")
    assert m is None and said["backend"] is None and said["why"] == "perf: needs root"
    m, said = capabilities("auto")  # as in an unprivileged pod
    assert m is not None and said["backend"] == "proc"
    assert said["why"] == "perf: needs root; bpftrace: needs root"
    m.close()


def test_cgroup_pinnable_writes_back_the_cpus_it_has(tmp_path):
    cg = tmp_path / "cpuset" / "kubepods" / "pod1"
    cg.mkdir(parents=True)
    (cg / "cpuset.cpus").write_text("0-1\n")
    self_cgroup = tmp_path / "self_cgroup"
    self_cgroup.write_text("3:cpuset:/kubepods/pod1\n")
    assert cgroup_pinnable(tmp_path, self_cgroup)
    assert parse_cpuset((cg / "cpuset.cpus").read_text()) == {0, 1}  # unchanged
    (cg / "cpuset.cpus").unlink()  # no cpuset (a pod's read-only cgroup fails the same way: an OSError)
    assert not cgroup_pinnable(tmp_path, self_cgroup)


def test_the_line_is_not_taken_for_a_workers_last_words(tmp_path):
    """The local backend reports a worker's last words from its log: never one of these lines."""
    log = tmp_path / "w.log"
    log.write_text('couldn\'t connect to 127.0.0.1:9: Connection refused\n'
                   '{"hta_worker": "css", "backend": null, "why": "perf: no tracefs ... refused", '
                   '"pinned_by": null, "cgroup_cpuset": false}\n')
    assert last_words(log).startswith("couldn't connect")
