"""What a rival's Jobs cost, read from a run's cluster timeline and its master's log
(no cluster: the files are written here as a real run writes them)."""

from __future__ import annotations

import json

import pytest

from testcluster.timeline import job_costs


def write(tmp_path, events, workers, tasks=()):
    tl = tmp_path / "timeline.jsonl"
    tl.write_text("".join(json.dumps({"t": t, "kind": k, "name": n, "event": e, **({"node": nd} if nd else {})}) + "\n"
                          for t, k, n, e, nd in events))
    tr = tmp_path / "Makeflow.wqlog.tr"
    lines = ["# time manager_pid WORKER worker_id host:port CONNECTION"]
    for t, conn in workers:
        lines.append(f"{int(t * 1e6)} 1 WORKER w 127.0.0.1:{int(t)} " + ("CONNECTION" if conn else "DISCONNECTION FAILURE"))
    for t, task, state, port in tasks:
        res = ' FIRST_RESOURCES {"cores":[1,"cores"]}' if state == "RUNNING" else ""
        lines.append(f"{int(t * 1e6)} 1 TASK {task} {state} 127.0.0.1:{port}{res}")
    lines.append(f"{int(50 * 1e6)} 1 WORKER (null) 127.0.0.1:9 DISCONNECTION STATUS_WORKER")
    tr.write_text("\n".join(lines) + "\n")
    return tl, tr


def test_job_costs_split_node_waits_pod_start_job_end_and_kedas_calls(tmp_path):
    events = [
        (0.0, "node", "old", "registered", ""),
        # a Job whose pod lands on the node already there: created → running 1 s
        (10.0, "job", "j1", "created", ""), (10.0, "pod", "j1-a", "created", ""),
        (10.4, "pod", "j1-a", "bound", "old"), (11.0, "pod", "j1-a", "running", "old"),
        (30.0, "pod", "j1-a", "succeeded", "old"), (34.0, "job", "j1", "complete", ""),
        # one that waits for a new node: created → bound 20 s
        (10.2, "job", "j2", "created", ""), (10.2, "pod", "j2-a", "created", ""),
        (25.0, "node", "new", "registered", ""),
        (30.2, "pod", "j2-a", "bound", "new"), (31.2, "pod", "j2-a", "running", "new"),
        (50.0, "pod", "j2-a", "succeeded", "new"), (54.0, "job", "j2", "complete", ""),
        # KEDA deleting two finished Jobs 0.5 s apart in one poll, during the run
        (32.0, "job", "j0", "deleted", ""), (32.5, "job", "j00", "deleted", ""),
        # the ScaledJob's removal after the run deletes the rest at once: not KEDA's polls
        (56.0, "job", "j1", "deleted", ""), (56.05, "job", "j2", "deleted", ""),
        # Karpenter removes each node some seconds after its last pod ended
        (52.0, "node", "old", "deleted", ""), (70.0, "node", "new", "deleted", ""),
    ]
    # workers connect 2 s after their pods run and get a task 0.5 s later; their tasks end
    # 3.5 s before their Jobs complete
    tl, tr = write(tmp_path, events, [(13.0, True), (33.2, True), (31.0, False), (51.0, False)],
                   [(13.5, 1, "RUNNING", 13), (30.5, 1, "WAITING_RETRIEVAL", 13),
                    (33.7, 2, "RUNNING", 33), (50.5, 2, "WAITING_RETRIEVAL", 33)])
    c = job_costs(tl, tr)
    assert c.node_wait_s == [pytest.approx(20.0)]
    assert c.pod_start_s == pytest.approx(1.0 + 2.5)  # created → running, then the lag to a first task
    assert c.job_end_s == pytest.approx(3.5)
    assert c.create_call_s == pytest.approx(0.2)
    assert c.delete_call_s == pytest.approx(0.5)
    assert c.node_hold_s == pytest.approx((22.0 + 20.0) / 2)
