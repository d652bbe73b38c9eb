"""A real run's controller inputs, played back through a fresh controller, give the
decisions the live run logged: production's control path is a deterministic function
of what it reads, which is what lets the simulator run that same path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_hta

from hta.policies.registry import make_policy
from hta.replay import ReplayDiverged, replay
from hta.scaling_log import read_records

pytestmark = pytest.mark.slow


def key(d):
    return (d.t, d.add, d.drain, d.remove, d.target, d.next_decision_s, d.reason)


def test_recorded_real_run_replays_to_the_same_decisions(blast_copy: Path, tmp_path: Path):
    tape = tmp_path / "tape.jsonl"
    # (no hold: the narrow stage's idle workers are drained while it runs, not only at the end;
    # no tail awareness: whatever still waits after one latency is bought for, so the run
    # scales up however fast this machine runs the aligns — with it, 3 of 9 runs here saw
    # each align stage drain within a latency on the first worker, bought nothing more and
    # never scaled down; without it, 6 of 6 scaled both ways)
    r = run_hta("makeflow", "--policy", "hta:hold_latencies=0,tail_aware=false", "--max-workers", "3", "--worker-cores", "1",
                "--provision-delay", "2", "--record", str(tape), str(blast_copy / "Makeflow"))
    assert r.returncode == 0, r.stdout + r.stderr
    live = [x for x in read_records(blast_copy / "Makeflow.scaling.jsonl")[0] if x.kind == "decision"]
    assert any(d.add for d in live) and any(d.drain for d in live), "the run must scale up and down"

    # the files every align reads, sized from the workflow's folder, went to the controller
    # (db.fa is made by a rule: not there when the run starts, so left out)
    import json
    head = json.loads(tape.read_text().splitlines()[0])["value"]["config"]
    assert set(head["shared_inputs"]["align"]) == {"align.py", "seqio.py"}
    # and what the backend tells of the world beyond the master (the node hold, each
    # worker's node, its jobs' time limit) is on the tape, for the replay to read back
    calls = {json.loads(line)["call"] for line in tape.read_text().splitlines()}
    assert {"node_hold_s", "worker_nodes", "job_ceiling"} <= calls

    replayed = replay(tape, make_policy("hta:hold_latencies=0,tail_aware=false"))
    assert [key(d) for d in replayed] == [key(d) for d in live]

    # another policy reads the same inputs and decides otherwise: the comparison can fail
    try:
        other = replay(tape, make_policy("factory"))
    except ReplayDiverged:
        return
    assert [key(d) for d in other] != [key(d) for d in live]
