"""Worker shape: nodes and worker pods apart in the simulator, several pods
per node, and HTA choosing the pods' shape from what it learned."""

import asyncio

import pytest

from hta.accounting import node_seconds
from hta.model import CategoryModel, LatencyStats, Observation, PendingWorker, Resources, TaskGroup, WorkerInfo
from hta.policies import make_policy
from hta.scaling_log import ScalingLogWriter, WorkerRecord
from hta.sim.cluster import ClusterModel
from hta.sim.run import Simulation
from hta.sim.workload import SimTask, Workload
from hta.sim.world import World
from hta.summary import paid_intervals

NODE = Resources(cores=3, memory_mb=15000, disk_mb=100000)
THIRD = NODE.split(3)
NODE4 = Resources(cores=4, memory_mb=16000, disk_mb=100000)


def world(**kw) -> World:
    base = dict(max_nodes=2, start_nodes=0, latency_mean_s=50.0, latency_sd_s=0.0, pod_start_s=2.0)
    base.update(kw)
    return World(Workload("t", [SimTask("a", "a", 10)]), ClusterModel(**base))


def test_three_thirds_share_one_node_and_the_node_goes_with_the_last():
    w = world()
    pods = [w.cluster.request_node(0.0, shape=THIRD) for _ in range(3)]
    assert len(w.cluster.hosts) == 1  # one node is prepared for the three
    w.env.run(until=60)
    assert [p.connected_at for p in pods] == [52.0, 52.0, 52.0]  # 50 s latency + 2 s pod start
    late = w.cluster.request_node(60.0, shape=THIRD)  # no room on the full node: a second one
    assert len(w.cluster.hosts) == 2 and late.host != pods[0].host
    for p in pods[:2]:
        w.cluster.retire(p.id, busy_ok=False)
    assert pods[0].host in w.cluster.hosts  # one pod still there: the node stays
    w.cluster.retire(pods[2].id, busy_ok=False)
    assert pods[0].host not in w.cluster.hosts  # empty, and no empty-node TTL: gone
    again = w.cluster.request_node(w.env.now, shape=THIRD)
    assert again.host == late.host  # lands beside the pod on the node being prepared
    w.env.run(until=200)
    assert again.connected_at == late.connected_at == 112.0


def test_a_pod_of_a_fraction_of_a_core_connects_with_the_whole_cores_a_real_worker_advertises():
    # a 4-core node cut in thirds: each pod asks 1.33 cores (three share the node), and its
    # worker advertises 1, as hta.node.capacity reads a 1333m limit
    tasks = [SimTask(f"t{i}", "a", 10, cores=0.25) for i in range(16)]
    w = World(Workload("t", tasks, declared=True),
              ClusterModel(max_nodes=1, start_nodes=0, node_cores=4, node_memory_mb=16000, latency_mean_s=50.0,
                           latency_sd_s=0.0, pod_start_s=2.0))
    part = NODE4.split(3)
    w.start()
    pods = [w.cluster.request_node(0.0, shape=part) for _ in range(3)]
    assert len(w.cluster.hosts) == 1
    w.env.run(until=53)
    assert [(p.capacity.cores, p.capacity.memory_mb) for p in pods] == [(1, 5333)] * 3
    assert [len(p.running) for p in pods] == [4, 4, 4]  # quarter-core tasks: 1 core's worth each, not 1.33's
    assert w.cluster.request_node(53.0, shape=part).host is None  # the node's 4 cores hold three such pods


def test_a_task_given_a_whole_pod_runs_at_the_pods_cpu_limit_not_its_workers_whole_cores():
    # a 1.5-core pod advertises 1 core; a task that declares nothing is given the worker and
    # keeps 1.5 cores busy: the quota is 1.5 cores, so it is neither throttled nor killed
    w = World(Workload("t", [SimTask("t0", "a", 100, cores=1.5, cpu_util=1.0)]),
              ClusterModel(max_nodes=1, start_nodes=0, latency_mean_s=50.0, latency_sd_s=0.0, pod_start_s=2.0))
    w.start()
    pod = w.cluster.request_node(0.0, shape=NODE.split(2))
    w.env.run(until=200)
    assert pod.capacity.cores == 1 and w.queue.retries == 0
    assert w.queue.summaries[0].wall_time_s == pytest.approx(100 + w.model.task_overhead_s)
    assert w.queue.summaries[0].cores == 1.5


def test_the_backend_reports_a_pods_ask_and_its_workers_whole_cores_as_the_k8s_backend_does():
    from hta.sim.backend import SimBackend

    w = World(Workload("t", [SimTask("a", "a", 10, cores=1)], declared=True),
              ClusterModel(max_nodes=1, start_nodes=0, node_cores=4, node_memory_mb=16000, latency_mean_s=50.0,
                           latency_sd_s=0.0, pod_start_s=2.0))
    b = SimBackend(w)
    part = NODE4.split(3)
    asyncio.run(b.request(1, part, 0.0))
    assert [p.shape.cores for p in b.pending()] == [pytest.approx(4 / 3)]
    w.env.run(until=60)
    events = asyncio.run(b.refresh(None, 60.0))  # (the simulated backend does not read the snapshot)
    assert [(e.event, round(e.cores, 2)) for e in events] == [("requested", 1.33), ("connected", 1)]


def test_a_node_of_a_fraction_of_a_core_more_is_still_node_sized():
    # 3.5 allocatable cores: the node's worker advertises 3, and is still the whole node
    # (a retried task's worker; paid per node, no other pod beside it)
    w = World(Workload("t", [SimTask("a", "a", 10)]), ClusterModel(max_nodes=1, start_nodes=0, node_cores=3.5))
    node = w.cluster.request_node(0.0)
    assert node.capacity.cores == 3 and w.cluster.node_sized(node)


def test_a_cpu_metric_reads_usage_over_the_pods_request():
    tasks = [SimTask("whole", "a", 100, cores=1.5, cpu_util=1.0), SimTask("one", "b", 100, cores=1, cpu_util=1.0)]
    w = World(Workload("t", tasks[:1]), ClusterModel(max_nodes=1, start_nodes=0, latency_mean_s=50.0,
                                                     latency_sd_s=0.0, pod_start_s=2.0))
    w.start()
    half = w.cluster.request_node(0.0, shape=NODE.split(2))  # asks 1.5 cores, advertises 1
    w.env.run(until=60)
    assert half.running and w.queue.cpu_busy(half) == pytest.approx(1.0)  # the whole-worker task keeps 1.5 busy
    w = World(Workload("t", tasks[1:], declared=True),
              ClusterModel(max_nodes=1, start_nodes=0, node_cores=4, node_memory_mb=16000, latency_mean_s=50.0,
                           latency_sd_s=0.0, pod_start_s=2.0))
    w.start()
    third = w.cluster.request_node(0.0, shape=NODE4.split(3))
    w.env.run(until=60)
    assert third.running and w.queue.cpu_busy(third) == pytest.approx(0.75)  # 1 core busy of the 1.33 asked


def test_a_single_threaded_task_on_a_whole_worker_reads_its_own_share_of_the_pod():
    # a task that declares nothing is given the whole 3-core worker, but one thread keeps one
    # core busy: the pod's CPU metric (cAdvisor's, what an HPA averages) reads a third, not all
    tasks = [SimTask("one", "a", 100, cores=1, cpu_util=0.9), SimTask("four", "a", 100, cores=4, cpu_util=1.0)]
    for task, expected in ((tasks[0], 0.3), (tasks[1], 1.0)):  # 4 threads are held to the 3-core quota
        w = World(Workload("t", [task]), ClusterModel(max_nodes=1, start_nodes=0, latency_mean_s=50.0,
                                                       latency_sd_s=0.0, pod_start_s=2.0))
        w.start()
        node = w.cluster.request_node(0.0)
        w.env.run(until=60)
        assert node.running and w.queue.cpu_busy(node) == pytest.approx(expected)


def test_the_node_cap_holds_pods_until_a_node_has_room():
    w = world(max_nodes=1)
    first = w.cluster.request_node(0.0)  # a whole node
    w.env.run(until=60)
    small = w.cluster.request_node(60.0, shape=THIRD)
    assert small.host is None and list(w.cluster.unplaced) == [small.id]  # unschedulable: the cap is reached
    w.cluster.retire(first.id, busy_ok=False)
    w.env.run(until=200)
    assert small.host is not None and small.connected_at is not None and len(w.cluster.hosts) == 1


def test_node_seconds_are_paid_per_node_when_pods_share_it():
    recs = [WorkerRecord(t=0, worker="n1", event="requested", node="h1"),
            WorkerRecord(t=10, worker="n2", event="requested", node="h1"),
            WorkerRecord(t=50, worker="n1", event="drained", node="h1"),
            WorkerRecord(t=80, worker="n2", event="drained", node="h1"),
            WorkerRecord(t=5, worker="n3", event="requested"),
            WorkerRecord(t=25, worker="n3", event="drained")]
    assert sorted(paid_intervals(recs)) == [(0, 80, 1.0), (5, 25, 1.0)]


def test_a_worker_of_no_named_node_pays_its_share_of_the_runs_node():
    # the local backend's workers name no node: a half-node worker (HTA's learned shapes on
    # 2-core --worker-cores) counted a whole node, so two paid twice what one node does
    recs = [WorkerRecord(t=0, worker="w1", event="requested", cores=1.0),
            WorkerRecord(t=0, worker="w2", event="requested", cores=1.0),
            WorkerRecord(t=5, worker="w3", event="requested", cores=2.0),
            WorkerRecord(t=60, worker="w1", event="drained"), WorkerRecord(t=60, worker="w2", event="drained"),
            WorkerRecord(t=65, worker="w3", event="drained")]
    assert sorted(paid_intervals(recs, node_cores=2.0)) == [(0, 60, 0.5), (0, 60, 0.5), (5, 65, 1.0)]
    assert node_seconds(paid_intervals(recs, node_cores=2.0), end=100) == 60 + 60
    assert node_seconds(paid_intervals(recs), end=100) == 180  # (no node size known: each its own)


def cat(name: str, cores: float, memory: float) -> CategoryModel:
    peak = Resources(cores=cores, memory_mb=memory, disk_mb=100)
    return CategoryModel(name=name, samples=5, peak=peak, runtime_mean_s=300, runtime_median_s=300,
                         runtime_p90_s=300)


def obs(waiting, categories, workers=(), pending=()) -> Observation:
    return Observation(time=100.0, worker_shape=NODE, max_workers=4, latency=LatencyStats(samples=[10.0]),
                       waiting=list(waiting), categories=categories, workers=list(workers), pending=list(pending))


def test_hta_cuts_nodes_into_the_smallest_part_that_holds_what_waits():
    small = TaskGroup(category="a", count=12, request=Resources(cores=1, memory_mb=2000, disk_mb=100))
    d = make_policy("hta:probe_split=1").decide(obs([small], {"a": cat("a", 1, 2000)}))
    assert d.shape == THIRD and d.add == 12  # 12 one-core tasks: 12 pods of 1/3 node, 4 nodes' worth
    # a task of 6 GB does not fit a third (5 GB): halves
    big = TaskGroup(category="b", count=2, request=Resources(cores=1, memory_mb=6000, disk_mb=100))
    d = make_policy("hta:probe_split=1").decide(obs([small, big], {"a": cat("a", 1, 2000),
                                                                          "b": cat("b", 1, 6000)}))
    assert d.shape == NODE.split(2)
    # a category never measured takes a whole worker: a whole node
    d = make_policy("hta:probe_split=1").decide(obs([TaskGroup(category="new", count=3)], {}))
    assert d.shape == NODE
    # whole nodes, if asked for
    assert make_policy("hta:worker_shape=node").decide(obs([small], {"a": cat("a", 1, 2000)})).shape == NODE


@pytest.mark.parametrize("worker, whole, share", [
    (THIRD, NODE, 1 / 3),
    # a third of 16,000 MB connects with a 5,333Mi limit (k8s.pods writes whole MiB)
    (Resources(cores=1, memory_mb=16000 // 3), Resources(cores=3, memory_mb=16000), 1 / 3),
    # a third of a 4-core node asks 1.33 cores and its worker advertises 1 (hta.node.capacity)
    (Resources(cores=4 / 3, memory_mb=16000 / 3), Resources(cores=4, memory_mb=16000), 1 / 3),
    (Resources(cores=1, memory_mb=16000 // 3), Resources(cores=4, memory_mb=16000), 1 / 3),
    (Resources(cores=2, memory_mb=8000), Resources(cores=4, memory_mb=16000), 1 / 2),
    # not one of k equal parts: whole, so the cap is never passed
    (Resources(cores=1, memory_mb=5000), Resources(cores=3, memory_mb=16000), 1.0),
    (Resources(cores=2, memory_mb=16000 // 3), Resources(cores=4, memory_mb=16000), 1.0),
    (Resources(cores=3, memory_mb=14990), NODE, 1.0),  # a node's worker reporting a little less
    (Resources(cores=1, memory_mb=5300), Resources(cores=3, memory_mb=16000), 1.0),  # 33 MB off a third
    (Resources(cores=1, memory_mb=512), Resources(cores=1, memory_mb=1024), 1.0),  # no part of a core
])
def test_a_worker_counts_its_share_of_the_cap_as_it_connects(worker, whole, share):
    assert worker.share_of(whole) == pytest.approx(share)


def test_the_cap_counts_smaller_workers_as_their_share():
    small = TaskGroup(category="a", count=12, request=Resources(cores=1, memory_mb=2000, disk_mb=100))
    there = [WorkerInfo(id="w1", capacity=NODE, in_use=NODE, running=3)]
    on_way = [PendingWorker(id="p1", requested_at=90.0, shape=THIRD)]
    d = make_policy("hta-time:probe_split=1").decide(obs([small], {"a": cat("a", 1, 2000)}, there, on_way))
    # 11 pods wanted (no tail cap); 4 nodes: 1 + 1/3 used, 2 2/3 left = 8 thirds
    assert d.shape == THIRD and d.add == 8


def test_a_simulated_run_with_learned_shapes_pays_nodes_not_pods():
    # 3 tasks of 60 s (never measured: whole nodes), then 30 one-core tasks of the same
    # category, released when they end: measured by then, so HTA buys thirds of a node
    first = [SimTask(f"s{i}", "a", 60) for i in range(3)]
    tasks = first + [SimTask(f"t{i}", "a", 300, parents=[t.id for t in first]) for i in range(30)]
    cluster = ClusterModel(max_nodes=10, latency_mean_s=20.0, latency_sd_s=0.0, teardown_s=0.0)
    log = ScalingLogWriter()
    # (hold_latencies=0: else the first wave's nodes are kept for the 30 and no pod is bought)
    s = Simulation(Workload("w", tasks), make_policy("hta-time:probe_split=1,hold_latencies=0"), cluster,
                   log=log).run()
    assert s.exit_code == 0
    workers = [r for r in log.records if isinstance(r, WorkerRecord)]
    pods = [r for r in workers if r.event == "requested" and r.node]
    assert pods and all(r.cores == pytest.approx(1.0) for r in pods)
    assert len({r.node for r in pods}) < len(pods)  # pods shared nodes
    per_pod = sum(r.t for r in workers if r.event != "requested" and r.event != "connected") - \
        sum(r.t for r in workers if r.event == "requested")
    assert s.node_s == pytest.approx(sum(b - a for a, b, _ in paid_intervals(workers)))
    assert s.node_s < per_pod  # shared nodes are paid once


def test_idle_pods_too_small_for_what_waits_are_drained_to_make_room():
    # the cap (1 node) holds 2 idle thirds; 2-core tasks wait, which no third can run
    pods = [WorkerInfo(id=f"p{i}", capacity=THIRD, connected_at=0.0, idle_since=50.0) for i in range(2)]
    wait = TaskGroup(category="b", count=2, request=Resources(cores=2, memory_mb=2000, disk_mb=100))
    o = obs([wait], {"b": cat("b", 2, 2000)}, pods).model_copy(update={"max_workers": 1})
    d = make_policy("hta-time:probe_split=1").decide(o)
    assert d.shape == NODE and sorted(d.drain) == ["p0", "p1"]
    # just idle (under one check): kept, the master may not have given them a task yet
    fresh = [p.model_copy(update={"idle_since": 99.0}) for p in pods]
    assert make_policy("hta-time:probe_split=1").decide(o.model_copy(update={"workers": fresh})).drain == []
    # whole nodes: never drained while tasks wait
    assert make_policy("hta-time:worker_shape=node").decide(o).drain == []


def test_idle_pods_a_waiting_task_fits_are_not_yet_served_not_too_small():
    # the replay on a loaded machine: 1-core tasks wait, two thirds connected a check ago
    # and the master has not given them one yet; draining them bought them again at once
    pods = [WorkerInfo(id=f"p{i}", capacity=THIRD.advertised(), connected_at=94.0, idle_since=94.0)
            for i in range(2)]  # (idle for 6 s: a check, 5 s, and less than a latency, 10 s)
    small = TaskGroup(category="a", count=190, request=Resources(cores=1, memory_mb=1000, disk_mb=10))
    o = obs([small], {"a": cat("a", 1, 1000)}, pods).model_copy(update={"max_workers": 5})
    assert make_policy("hta").decide(o).drain == []
    # unserved for a whole preparation latency (10 s here) all the same: the master will not
    # give them what waits, and their share of the cap goes to a node
    stuck = [p.model_copy(update={"idle_since": 85.0}) for p in pods]
    assert sorted(make_policy("hta").decide(o.model_copy(update={"workers": stuck})).drain) == ["p0", "p1"]
    # beside a task they cannot hold, the same pods are too small for it
    big = TaskGroup(category="b", count=2, request=Resources(cores=2, memory_mb=2000, disk_mb=100))
    o2 = o.model_copy(update={"waiting": [big], "categories": {"b": cat("b", 2, 2000)}, "max_workers": 1})
    assert sorted(make_policy("hta").decide(o2).drain) == ["p0", "p1"]
    # a pod that has not told its cores yet is not known to be small
    silent = [p.model_copy(update={"capacity": Resources()}) for p in pods]
    assert make_policy("hta").decide(o2.model_copy(update={"workers": silent})).drain == []


def test_a_task_retried_on_a_whole_worker_waits_for_a_node_sized_one():
    w = world(max_nodes=2, start_nodes=0)
    w.queue.whole_worker.add("a")  # as if it had gone over its allocation once
    w.makeflow.release(["a"])
    small = w.cluster.request_node(0.0, shape=THIRD)
    w.env.run(until=60)
    assert small.connected_at is not None and not small.running  # a third: not for it
    big = w.cluster.request_node(60.0)
    w.env.run(until=200)
    assert big.connected_at is not None and "a" in w.makeflow.done


def test_a_task_needing_more_cores_than_its_pod_is_throttled_and_more_memory_killed():
    # what a Guaranteed pod's limits do to a task that declares nothing (Work Queue and
    # makeflow's monitor stop neither): 2 cores on a 1-core pod run at half speed and are
    # measured at 1 core; 6,000 MB on a 5,000 MB pod is killed halfway, retried on a node
    tasks = [SimTask("cpu", "c", 100, cores=2), SimTask("mem", "m", 100, memory_mb=6000)]
    w = World(Workload("t", tasks), ClusterModel(max_nodes=3, start_nodes=0, latency_mean_s=50.0,
                                                 latency_sd_s=0.0, pod_start_s=2.0))
    pods = [w.cluster.request_node(0.0, shape=THIRD) for _ in range(2)]
    w.makeflow.release(["cpu"])
    w.makeflow.release(["mem"])
    w.env.run(until=60)
    assert all(p.connected_at == 52.0 for p in pods) and len(w.queue.runs) == 2
    w.env.run(until=110)
    assert "mem" in w.queue.whole_worker and w.queue.retries == 1 and w.queue.lost_work == pytest.approx(50 * 1)
    node = w.cluster.request_node(110.0)
    w.env.run(until=400)
    assert w.makeflow.done == {"cpu", "mem"} and w.queue.retries == 1
    cpu = next(s for s in w.queue.summaries if s.category == "c")
    assert cpu.wall_time_s == pytest.approx(200) and cpu.cores == 1.0  # throttled: 2 × as long, 1 core read
    mem = next(s for s in w.queue.summaries if s.category == "m")
    assert mem.start == pytest.approx(node.connected_at) and mem.wall_time_s == pytest.approx(100)


def test_a_pod_never_outgrows_its_node():
    w = world()
    huge = w.cluster.request_node(0.0, shape=Resources(cores=30, memory_mb=150000, disk_mb=10))
    assert huge.capacity == Resources(cores=3, memory_mb=15000, disk_mb=10)


def test_a_pod_that_waited_for_room_pays_from_when_it_got_it():
    # one node: a whole worker 0–100; a third asked for at 60 waits for room until 100
    recs = [WorkerRecord(t=0, worker="n1", event="requested"),
            WorkerRecord(t=60, worker="n2", event="requested", node=""),
            WorkerRecord(t=100, worker="n1", event="drained"),
            WorkerRecord(t=102, worker="n2", event="connected", node="h2", phases={"room": 40.0}),
            WorkerRecord(t=200, worker="n2", event="drained", node="h2"),
            WorkerRecord(t=70, worker="n3", event="requested", node=""),  # cancelled while waiting
            WorkerRecord(t=80, worker="n3", event="drained", node="")]
    assert sorted(paid_intervals(recs)) == [(0, 100, 1.0), (100, 200, 1.0)]


def test_a_smaller_worker_counts_as_its_share_only_when_it_is_an_exact_part():
    assert THIRD.share_of(NODE) == pytest.approx(1 / 3)
    assert NODE.split(2).share_of(NODE) == 0.5
    # a worker reporting a little less than asked (whole cores, a cgroup's limit) counts whole
    assert Resources(cores=2, memory_mb=2000).share_of(Resources(cores=2.5, memory_mb=2000)) == 1.0
    # ... but a third of a 4-core node connects with 1 core of its 1.33 (whole cores): a third
    assert Resources(cores=1, memory_mb=5000).share_of(Resources(cores=4, memory_mb=15000)) == pytest.approx(1 / 3)


def test_probe_split_buys_small_pods_for_never_measured_tasks_but_a_node_for_a_retry():
    first_wave = TaskGroup(category="new", count=30)  # never measured: a whole worker each
    d = make_policy("hta-time").decide(obs([first_wave], {}))
    assert d.shape == THIRD and d.add == 12  # the cap: 4 nodes of 3 pods
    assert make_policy("hta-time:probe_split=1").decide(obs([first_wave], {})).shape == NODE
    # where the master gives a measured category its peak (makeflow --allocation), a task of
    # one waiting for a whole worker went over its allocation: a node
    retry = TaskGroup(category="a", count=1)
    packed = obs([first_wave, retry], {"a": cat("a", 1, 2000)}).model_copy(update={"auto_allocation": True})
    assert make_policy("hta-time").decide(packed).shape == NODE
    with pytest.raises(ValueError, match="probe_split must be a whole number"):
        make_policy("hta:probe_split=0")


def test_a_task_given_its_request_is_not_cut_a_pod_whose_worker_cannot_hold_it():
    # halves of a 3-core node ask 1.5 cores and connect with 1: a task declaring 1.2 cores
    # fits none of them (HTA bought and drained them for ever before), so a whole node
    declared = TaskGroup(category="a", count=6, request=Resources(cores=1.2, memory_mb=1000, disk_mb=100))
    d = make_policy("hta:probe_split=1").decide(obs([declared], {"a": cat("a", 1.2, 1000)}))
    assert d.shape == NODE and d.add == 3  # two to a node
    tasks = [SimTask(f"t{i}", "x", 300, cores=1.2, cpu_util=1.0, memory_mb=1000) for i in range(40)]
    s = Simulation(Workload("d", tasks, declared=True), make_policy("hta"),
                   ClusterModel(max_nodes=4, start_nodes=0, latency_mean_s=60, latency_sd_s=0, horizon_s=20000)).run()
    assert s.exit_code == 0


def test_a_purchase_of_parts_is_sized_by_what_their_workers_advertise():
    # a never-measured task caps the cut at thirds: a third of a 4-core node asks 1.33 cores
    # and its worker advertises 1, so it holds 4 quarter-core tasks, not 5: 40 need 10 pods
    # (and 1 probe for the never-measured task), not 8
    small = TaskGroup(category="a", count=40, request=Resources(cores=0.25, memory_mb=1000, disk_mb=100))
    o = obs([small, TaskGroup(category="new", count=1)], {"a": cat("a", 0.25, 1000)})
    d = make_policy("hta").decide(o.model_copy(update={"worker_shape": NODE4, "max_workers": 20}))
    assert d.shape == NODE4.split(3) and d.add == 11


def test_pods_on_their_way_count_what_their_workers_will_advertise():
    # 8 thirds of a 4-core node on their way each ask 1.33 cores but will hold 4 quarter-core
    # tasks (1 advertised core), not 5: 40 such tasks need 2 more, and the cap is counted
    # by what the pods ask (8 thirds: 2 2/3 nodes of 20)
    small = TaskGroup(category="a", count=40, request=Resources(cores=0.25, memory_mb=1000, disk_mb=100))
    on_way = [PendingWorker(id=f"p{i}", requested_at=99.0, shape=NODE4.split(3)) for i in range(8)]
    o = obs([small], {"a": cat("a", 0.25, 1000)}, pending=on_way)
    d = make_policy("hta:probe_split=3").decide(o.model_copy(update={"worker_shape": NODE4, "max_workers": 20}))
    assert d.add == 2


@pytest.mark.parametrize("peak_cores, shape, add", [(1, THIRD, 6), (1.5, NODE.split(2), 6), (2, NODE, 4)])
def test_where_every_task_takes_a_whole_worker_a_measured_one_gets_a_pod_of_its_peak(peak_cores, shape, add):
    # makeflow -T wq without --allocation: a task that declares nothing takes a whole worker
    # however often its category was measured, so the worker's size is what fits it
    waiting = TaskGroup(category="a", count=6)
    d = make_policy("hta:probe_split=1").decide(obs([waiting], {"a": cat("a", peak_cores, 2000)}))
    assert d.shape == shape and d.add == add  # (the cap: 4 nodes)
    # never measured beside it: a node (probe_split=1), whatever the measured ones fit
    both = obs([waiting, TaskGroup(category="new", count=1)], {"a": cat("a", 1, 2000)})
    assert make_policy("hta:probe_split=1").decide(both).shape == NODE


def test_a_whole_worker_task_must_fit_the_whole_mb_its_pods_worker_advertises():
    # a third of a 16,000 MB node asks 5,333.33 MB and its worker advertises 5,333: a task
    # that peaked at 5,333.2 MB would be killed on it (the allocation is the advertised
    # worker), so halves; its cores may borrow the pod's quota, its memory may not
    o = obs([TaskGroup(category="a", count=6)], {"a": cat("a", 1, 5333.2)})
    d = make_policy("hta:probe_split=1").decide(o.model_copy(update={"worker_shape": NODE4}))
    assert d.shape == NODE4.split(2)
    o = obs([TaskGroup(category="a", count=6)], {"a": cat("a", 1, 5332.9)})
    assert make_policy("hta:probe_split=1").decide(o.model_copy(update={"worker_shape": NODE4})).shape == NODE4.split(3)


def test_a_never_measured_task_that_waits_beside_idle_pods_gets_a_node_next():
    # a third sat idle while a never-measured task waited: the task needs more than a third
    # (it went over one); drain the third, and buy a node for it, not another third
    p = make_policy("hta-time")
    pods = [WorkerInfo(id="p0", capacity=THIRD, connected_at=0.0, idle_since=50.0)]
    big = TaskGroup(category="x", count=1)
    d = p.decide(obs([big], {}, pods))
    assert d.drain == ["p0"]
    d = p.decide(obs([big], {}))
    assert d.shape == NODE and d.add == 1
    # a fresh policy, never having seen that, probes with a third
    assert make_policy("hta-time").decide(obs([big], {})).shape == THIRD


def test_a_pod_bound_to_a_node_already_there_is_not_a_sample_of_the_preparation_latency():
    # two thirds on one node being prepared (50 s), a third beside them once it is there
    w = world()
    first = [w.cluster.request_node(0.0, shape=THIRD) for _ in range(2)]
    w.env.run(until=60)
    beside = w.cluster.request_node(60.0, shape=THIRD)
    w.env.run(until=100)
    assert [p.node_wait_s for p in first] == [50.0, 50.0] and beside.node_wait_s == 0.0
    from hta.sim.backend import SimBackend

    events = [e for e in asyncio.run(SimBackend(w).refresh(None, w.env.now)) if e.event == "connected"]
    # (the node phase counts from the request to the pod's start there, as before)
    assert [(e.latency_s, e.phases["node"], e.phases["unschedulable"]) for e in events] == \
        [(52.0, 52.0, 50.0), (52.0, 52.0, 50.0), (2.0, 0.0, 0.0)]
    stats = LatencyStats(prior_s=30.0)
    for e in events:
        stats.add(e.latency_s, e.phases)
    assert (stats.samples, stats.room_samples, stats.estimate()) == ([52.0, 52.0], [2.0], 52.0)
    # outnumbered by pods that found room, the one that waited still sets L
    few = LatencyStats()
    for lat, unsched in [(150.0, 148.0), (3.0, 0.0), (2.0, 0.0)]:
        few.add(lat, {"node": lat - 2, "unschedulable": unsched})
    assert few.estimate() == 150.0 and few.measured == [150.0]
    # Kubernetes tells by the unschedulable phase, whatever the node phase (a slow scheduler)
    assert not LatencyStats.waited_for_node({"node": 5.0, "unschedulable": 0.0})
    assert LatencyStats.waited_for_node({"node": 1.0, "unschedulable": 0.5})
    # only pods that found room (a cluster of fixed size): those are how workers come
    fixed = LatencyStats(prior_s=30.0)
    fixed.add(3.0, {"node": 0.4, "start": 2.0})
    fixed.add(5.0, {"node": 0.1, "start": 4.0})
    assert fixed.estimate() == 4.0 and fixed.estimate("last") == 5.0
    # ... unless a worker still on its way has waited longer than they took: Slurm's workers
    # on the static node connected in 3 s while the cloud nodes' boot 30 s; at 33 s the 3 s
    # bought 6 more workers that came after the stage they were for
    assert fixed.frozen(waiting_s=4.5).estimate() == 4.0  # (not longer than all of them took)
    assert fixed.frozen(waiting_s=33.0).estimate() == 33.0
    assert fixed.frozen(waiting_s=20.0).estimate() == 30.0  # (the prior, where it says more)
    assert LatencyStats(prior_s=15.7).frozen(waiting_s=40.0).estimate() == 40.0  # nothing connected yet
    slow = LatencyStats(prior_s=30.0)
    slow.add(52.0, {"node": 50.0, "unschedulable": 50.0})
    assert slow.frozen(waiting_s=80.0).estimate() == 52.0  # a worker that waited for a node says how long
    local = LatencyStats()
    local.add(7.0, {"provisioning": 5.0})  # a backend that does not tell the node apart
    assert local.samples == [7.0]


def test_pods_that_land_beside_others_leave_hta_s_horizon_at_the_node_latency():
    # BLAST on 200 nodes with 1/3-node pods: a purchase for the third stage lands partly on
    # nodes the second stage's pods still hold; counted in L, those made it 0 s, and HTA
    # drained them a second later as idle workers no task needed within it (1,634 s)
    from hta.sim.workload import load_workload

    log = ScalingLogWriter()
    cluster = ClusterModel(max_nodes=200)
    s = Simulation(load_workload("blast-3stage", 0), make_policy("hta"),
                   cluster, seed=0, log=log).run()
    decided = [r.latency_s for r in log.records if type(r).__name__ == "DecisionRecord" and r.latency_s is not None]
    assert min(decided) >= 140.0  # never below the world's smallest draw (157.4 − 4 × 4.2)
    from hta.summary import summarize

    found_room = [r for r in log.records if type(r).__name__ == "WorkerRecord" and r.event == "connected"
                  and r.latency_s is not None and r.phases.get("node") == 0.0]
    report = summarize(log.records)  # the report's L reads the same way
    waited = [r for r in log.records if type(r).__name__ == "WorkerRecord" and r.event == "connected"
              and r.latency_s is not None and r.phases["unschedulable"] > 0]
    assert found_room and report.latency_count == len(waited) and report.latency_median_s >= 140.0
    whole = Simulation(load_workload("blast-3stage", 0), make_policy("hta:worker_shape=node"), cluster, seed=0,
                       log=ScalingLogWriter()).run()
    assert s.runtime_s <= 1.01 * whole.runtime_s and s.node_s < 0.6 * whole.node_s


def test_small_pods_for_never_measured_tasks_cost_where_those_tasks_need_more():
    # what probes, HTA's default, cost where their guess is wrong: with 2-core aligns, every first-wave align on a
    # third of a node is throttled to its one core and runs 1.9 × as long (read as 1 core;
    # the align the starting node ran reads 2, the category's peak, and later ones get nodes)
    from hta.sim.workload import load_workload

    wl = load_workload("blast-3stage-2core", 0)
    assert {t.cores for t in wl.tasks if t.category == "align"} == {2}
    cluster = ClusterModel(max_nodes=200)
    runs = {spec: Simulation(wl, make_policy(spec), cluster, seed=0, log=ScalingLogWriter())
            for spec in ("hta:worker_shape=node", "hta")}
    whole, probe = (sim.run() for sim in runs.values())
    assert whole.tasks_retried == probe.tasks_retried == 0
    throttled = [[s for s in sim.world.queue.summaries if s.category == "align" and s.cores == 1.0] for sim in runs.values()]
    assert throttled[0] == [] and len(throttled[1]) > 100
    assert all(s.wall_time_s > 1.8 * 240 for s in throttled[1])  # aligns: 300 s ± 20 %, at 1.9 ×
    assert probe.runtime_s > 1.2 * whole.runtime_s
