"""What a rival's Jobs cost, read from a run's cluster timeline and its master's log
(no cluster: the files are written here as a real run writes them)."""

from __future__ import annotations

import json

import pytest

from testcluster.timeline import job_costs, worker_addresses


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


def test_each_pod_is_paired_with_its_own_worker_where_the_pods_logs_name_it(tmp_path):
    """Three tasks a Job: pods run in one order and their workers finish in another, so
    pairing stages in order is off (it once gave a Job outliving its last task by −10 s)."""
    events = [
        (0.0, "node", "old", "registered", ""),
        # (ja's Job was made 1.5 s before the Job controller made its pod: its start counts it)
        (8.5, "job", "ja", "created", ""), (10.0, "pod", "ja-x1", "created", ""),
        (10.2, "pod", "ja-x1", "bound", "old"), (11.0, "pod", "ja-x1", "running", "old"),
        (11.0, "job", "jb", "created", ""), (11.0, "pod", "jb-y2", "created", ""),
        (11.2, "pod", "jb-y2", "bound", "old"), (12.0, "pod", "jb-y2", "running", "old"),
        (12.0, "job", "jc", "created", ""), (12.0, "pod", "jc-z3", "created", ""),
        (12.2, "pod", "jc-z3", "bound", "old"), (13.0, "pod", "jc-z3", "running", "old"),
        (62.0, "job", "ja", "complete", ""), (23.0, "job", "jb", "complete", ""),
        (61.0, "pod", "ja-x1", "succeeded", "old"), (22.0, "pod", "jb-y2", "succeeded", "old"),
        # (jc's pod failed after its task: its Job never completes)
    ]
    # ja's worker (port 14) gets its first task at 13 and its last ends at 60; jb's (port 15)
    # 14.5 and 21; jc's (16) 15 and 16
    tl, tr = write(tmp_path, events, [(13.0, True), (14.0, True), (14.5, True)],
                   [(13.0, 1, "RUNNING", 14), (14.5, 2, "RUNNING", 15), (15.0, 3, "RUNNING", 16),
                    (16.0, 3, "WAITING_RETRIEVAL", 16), (21.0, 2, "WAITING_RETRIEVAL", 15),
                    (60.0, 1, "WAITING_RETRIEVAL", 14)])
    pods = tmp_path / "pods"
    pods.mkdir()
    for pod, port in (("ja-x1", 14), ("jb-y2", 15), ("jc-z3", 16)):
        (pods / f"default_{pod}.log").write_text(f"connected to manager 127.0.0.1:9 via local address "
                                                 f"127.0.0.1:{port}\n")
    addresses = worker_addresses(pods)
    assert addresses == {"ja-x1": "127.0.0.1:14", "jb-y2": "127.0.0.1:15", "jc-z3": "127.0.0.1:16"}
    c = job_costs(tl, tr, addresses)
    assert c.pod_start_s == pytest.approx(((13.0 - 8.5) + (14.5 - 11.0) + (15.0 - 12.0)) / 3)
    assert c.job_end_s == pytest.approx(2.0)  # each Job 2 s after its own worker's last task
    assert c.pod_end_s == pytest.approx(1.0)  # each pod ends 1 s after it (jc's failed: not counted)
    # running → the worker's first task: ja 11 → 13, jb 12 → 14.5, jc 13 → 15
    assert c.connect_s == pytest.approx((2.0 + 2.5 + 2.0) / 3)
    assert job_costs(tl, tr).job_end_s != pytest.approx(2.0)  # (in order: off)


def test_a_node_is_open_to_new_pods_from_its_last_pods_end_to_karpenters_disruption_taint(tmp_path):
    from testcluster.timeline import node_delete_s, node_open_s

    events = [
        (0.0, "node", "a", "registered", ""), (0.0, "node", "b", "registered", ""),
        # a: two pods; the later one's end (a Job's pod exits) empties it, tainted 4 s later
        (1.0, "pod", "p1", "running", "a"), (5.0, "pod", "p1", "succeeded", "a"),
        (2.0, "pod", "p2", "running", "a"), (10.0, "pod", "p2", "succeeded", "a"),
        (14.0, "node", "a", "disrupted", ""), (30.0, "node", "a", "deleted", ""),
        # b: its pod is deleted (HTA drains it); its deletion begins the end, tainted 2 s later
        (1.0, "pod", "p3", "running", "b"), (20.0, "pod", "p3", "deleting", "b"),
        (21.0, "pod", "p3", "deleted", "b"), (22.0, "node", "b", "disrupted", ""),
        # c was tainted with a pod still on it (its watch line came late): not an emptied node
        (0.0, "node", "c", "registered", ""), (1.0, "pod", "p4", "running", "c"),
        (5.0, "node", "c", "disrupted", ""), (9.0, "pod", "p4", "succeeded", "c"),
        (1.0, "pod", "p5", "running", "c"), (2.0, "pod", "p5", "succeeded", "c"),
    ]
    tl, _ = write(tmp_path, events, [])
    assert node_open_s(tl) == pytest.approx((4.0 + 2.0) / 2)
    assert node_delete_s(tl) == pytest.approx(30.0 - 14.0)  # (b and c are not deleted yet)
    tl.write_text("")
    assert node_open_s(tl) is None and node_delete_s(tl) is None  # no node disrupted
