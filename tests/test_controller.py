"""The controller on its own: decision clamps, intervals and survival of its dependencies'
errors. Its master and backend are the simulator's (a simulated world whose clock the test
moves), or, for the outage, a real HTTP client and a real Work Queue master."""

from __future__ import annotations

import asyncio
import socket

from conftest import Master, wait

from hta.controller import Controller, ControllerConfig
from hta.model import ScaleDecision
from hta.scaling_log import ScalingLogWriter
from hta.sim.backend import SimBackend
from hta.sim.cluster import ClusterModel
from hta.sim.master import SimMaster, SimMonitor
from hta.sim.run import run_now
from hta.sim.workload import SimTask, Workload
from hta.sim.world import World
from resource_monitor.categories import CategoryLearner
from workqueue_bridge.status import MasterStatusClient


class Asks:
    """A test policy: answers every decision with the same request; counts its calls."""

    name = "asks"

    def __init__(self, decision: ScaleDecision):
        self.decision = decision
        self.calls: list[float] = []

    def decide(self, obs):
        self.calls.append(obs.time)
        return self.decision


def controller_on_world(policy, tasks_n: int = 50, runtime_s: float = 1000, **config) -> tuple[Controller, World]:
    """The production controller over a simulated world of ``tasks_n`` tasks of ``runtime_s``."""
    tasks = [SimTask(f"t{i}", "a", runtime_s=runtime_s) for i in range(tasks_n)]
    world = World(Workload("w", tasks), ClusterModel(max_nodes=100, start_nodes=0, latency_mean_s=30,
                                                    latency_sd_s=0), seed=0)
    cfg = dict(worker_shape=world.model.node_shape, max_workers=5, min_interval_s=10, max_interval_s=60)
    cfg.update(config)
    c = Controller(master=SimMaster(world), backend=SimBackend(world), policy=policy, learner=CategoryLearner(),
                   summaries=SimMonitor(world), scaling_log=ScalingLogWriter(), config=ControllerConfig(**cfg),
                   epoch=0.0, clock=lambda: world.env.now)
    world.start()
    return c, world


def at(world: World, t: float) -> None:
    """Move the simulated clock to ``t``."""
    if t > world.env.now:
        world.env.run(until=t)


def test_adds_are_clamped_to_max_workers_counting_those_on_their_way():
    c, world = controller_on_world(Asks(ScaleDecision(add=50, next_decision_s=0)))
    run_now(c.step())
    assert c.decisions[-1].add == 5 and len(c.backend.pending()) == 5
    at(world, 10)
    run_now(c.step())  # 5 still on their way: nothing more may be asked
    assert c.decisions[-1].add == 0 and len(c.backend.pending()) == 5


def test_decisions_wait_at_least_min_interval_and_at_most_max_interval():
    eager = Asks(ScaleDecision(next_decision_s=0.5))
    c, world = controller_on_world(eager)
    for t in (0, 3, 9.9, 10, 15, 20):
        at(world, t)
        run_now(c.step())
    assert eager.calls == [0, 10, 20]  # asked again only after min_interval_s (10 s)
    assert all(d.next_decision_s == 10 for d in c.decisions)

    lazy = Asks(ScaleDecision(next_decision_s=10_000))
    c, world = controller_on_world(lazy)
    for t in (0, 59, 60, 100, 120):
        at(world, t)
        run_now(c.step())
    assert lazy.calls == [0, 60, 120] and c.next_wake() == 180  # at most max_interval_s (60 s) apart


def test_observations_between_decisions_are_logged_only_when_something_changed():
    c, world = controller_on_world(Asks(ScaleDecision(add=1, next_decision_s=100)))
    for t in (0, 1, 2, 3):
        at(world, t)
        run_now(c.step())
    obs = [r for r in c.log.records if r.kind == "observation"]
    # t=0 before the request, t=1 with one worker on its way; t=2, 3 repeat t=1: one step of the curve
    assert [(r.t, r.pending) for r in obs] == [(0, 0), (1, 1)]
    at(world, 31)  # the worker connected: supply changed
    run_now(c.step())
    assert [(r.t, r.workers) for r in c.log.records if r.kind == "observation"][-1] == (31, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_the_loop_survives_an_unreachable_master_and_recovers(tmp_path):
    master = Master()  # a real Work Queue master, pumped by a thread
    real_port = master.port
    try:
        # first pointed at a port nobody listens on; then, like a master that came back, at the real one
        client = MasterStatusClient("127.0.0.1", free_port(), timeout_s=1.0)
        tasks = [SimTask("t", "a", 1)]
        world = World(Workload("w", tasks), ClusterModel(start_nodes=0), seed=0)
        policy = Asks(ScaleDecision(next_decision_s=0))
        c = Controller(master=client, backend=SimBackend(world), policy=policy, learner=CategoryLearner(),
                       summaries=SimMonitor(world), scaling_log=ScalingLogWriter(tmp_path / "log.jsonl"),
                       config=ControllerConfig(worker_shape=world.model.node_shape, poll_interval_s=0.05,
                                               min_interval_s=0.1), epoch=0.0)
        finished = asyncio.Event()
        loop = asyncio.create_task(c.run(finished))
        assert await asyncio.to_thread(wait, lambda: c.last_error, 10), "the failure was not reported"
        assert "ClientConnector" in c.last_error and not loop.done()
        failing = len(policy.calls)
        client.base = f"http://127.0.0.1:{real_port}"
        assert await asyncio.to_thread(wait, lambda: c.last_error is None and len(policy.calls) > failing, 10)
        finished.set()
        await asyncio.wait_for(loop, 5)
        await client.close()
    finally:
        master.close()




def test_an_observer_reading_the_time_is_not_recorded_as_the_control_paths_read(tmp_path):
    # a recorded run writes down every clock read of the control path; the panel reading the
    # time for a failed step's line (or the status page, when someone asks) must not add one,
    # or the replay, which plays back only the control path's reads, diverges there
    import json

    from hta.replay import RecordingClock, Tape
    from hta.status.panel import LiveView

    c, world = controller_on_world(Asks(ScaleDecision(next_decision_s=10)))
    tape = Tape(tmp_path / "tape.jsonl")
    c.clock = RecordingClock(c.clock, tape)
    run_now(c.step())
    at(world, 5.0)
    assert c.now() == 5.0
    c.last_error = "ConnectionError: the master went away"
    panel = LiveView(c, info=None, mode="lines")
    assert any("the master went away" in line for line in panel.new_lines())
    run_now(c.step())
    tape.close()
    reads = [e for e in map(json.loads, (tmp_path / "tape.jsonl").read_text().splitlines()) if e["call"] == "clock"]
    assert [r["value"] for r in reads] == [0.0, 5.0]  # one a step
