"""The run's numbers in Prometheus' text format, read from a snapshot at scrape time.

A custom collector on its own :class:`~prometheus_client.CollectorRegistry`
(not the process-global one): the values already live in the controller, so
nothing is updated on the side; each scrape builds one
:class:`~hta.status.snapshot.StatusSnapshot` and reports it. Every name starts
with ``hta_``; see :data:`METRICS` for the list.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from hta.status.snapshot import StatusSnapshot

#: buckets of the preparation-latency histogram, seconds (a local worker: ~1–10 s; a pod on a new node: minutes)
LATENCY_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0)

#: the time–cost dial's plan: only in a run given --deadline or --budget, each once it has a value
DIAL_METRICS = ("hta_deadline_seconds", "hta_projected_end_seconds", "hta_budget_node_seconds",
                "hta_spent_node_seconds")

#: every metric family exposed (the name as Prometheus' parser reports it)
METRICS = (
    "hta_run_info", "hta_elapsed_seconds", "hta_tasks", "hta_tasks_done", "hta_tasks_failed", "hta_workers",
    "hta_cores", "hta_waste_core_seconds", "hta_idle_waste_core_seconds", "hta_shortage_core_seconds",
    "hta_preparation_latency_seconds", "hta_preparation_latency_estimate_seconds", "hta_decisions",
    "hta_worker_events", "hta_step_failures", "hta_step_failing", "hta_max_workers", "hta_at_cap",
    "hta_held_back_workers", *DIAL_METRICS,
)


def latency_buckets(samples: list[float]) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs, +Inf last, as a Prometheus histogram has them."""
    out = [(repr(b), float(sum(1 for s in samples if s <= b))) for b in LATENCY_BUCKETS]
    return out + [("+Inf", float(len(samples)))]


class SnapshotCollector(Collector):
    """Reads ``source()`` once per scrape and turns it into metric families."""

    def __init__(self, source: Callable[[], StatusSnapshot]):
        self.source = source

    def collect(self) -> Iterator[Metric]:
        s = self.source()
        info = GaugeMetricFamily("hta_run_info", "What this HTA process runs (always 1)",
                                 labels=["workflow", "policy", "backend", "pid"])
        info.add_metric([s.run.workflow or "", s.run.policy, s.run.backend, str(s.run.pid)], 1)
        yield info
        yield GaugeMetricFamily("hta_elapsed_seconds", "Seconds since the run started", value=s.elapsed_s)

        tasks = GaugeMetricFamily("hta_tasks", "Tasks waiting or running now, per category",
                                  labels=["category", "state"])
        for c in s.tasks.categories:
            tasks.add_metric([c.name, "waiting"], c.waiting)
            tasks.add_metric([c.name, "running"], c.running)
        yield tasks
        yield CounterMetricFamily("hta_tasks_done", "Tasks completed so far", value=s.tasks.done)
        yield CounterMetricFamily("hta_tasks_failed", "Tasks failed so far", value=s.tasks.failed)

        workers = GaugeMetricFamily("hta_workers", "Workers: busy or idle (connected), pending (on their way)",
                                    labels=["state"])
        for state in ("busy", "idle", "pending"):
            workers.add_metric([state], sum(1 for w in s.workers if w.state == state))
        yield workers

        cores = GaugeMetricFamily("hta_cores", "Cores: supply (connected workers), in_use (running tasks), "
                                  "demand (in use + wanted by waiting tasks), idle (workers running nothing)",
                                  labels=["kind"])
        for kind in ("supply", "in_use", "demand", "idle"):
            cores.add_metric([kind], getattr(s.cores, kind))
        yield cores

        a = s.accounting
        yield CounterMetricFamily("hta_waste_core_seconds", "Core-seconds supplied and not used so far",
                                  value=a.waste_core_s)
        yield CounterMetricFamily("hta_idle_waste_core_seconds", "The part of the waste on idle workers",
                                  value=a.idle_waste_core_s)
        yield CounterMetricFamily("hta_shortage_core_seconds", "Core-seconds of work that waited for cores so far",
                                  value=a.shortage_core_s)

        lat = s.latency
        yield HistogramMetricFamily("hta_preparation_latency_seconds",
                                    "Measured preparation latency: worker requested to connected",
                                    buckets=latency_buckets(lat.samples_s), sum_value=sum(lat.samples_s))
        yield GaugeMetricFamily("hta_preparation_latency_estimate_seconds",
                                "The latency L the policy uses now (the prior until one is measured)",
                                value=lat.estimate_s)

        decisions = CounterMetricFamily("hta_decisions", "Scaling decisions so far, by kind (up, down, none)",
                                        labels=["kind"])
        for kind, n in s.decision_counts.items():
            decisions.add_metric([kind], n)
        yield decisions
        events = CounterMetricFamily("hta_worker_events", "Worker events so far (requested, connected, drained, "
                                     "lost, ...)", labels=["event"])
        for event, n in sorted(s.worker_event_counts.items()):
            events.add_metric([event], n)
        yield events
        yield CounterMetricFamily("hta_step_failures", "Controller steps that failed (an API error of the master "
                                  "or the backend)", value=s.step_failures)
        yield GaugeMetricFamily("hta_step_failing", "1 while the last step failed", value=1 if s.last_error else 0)
        if s.cap is not None:
            yield GaugeMetricFamily("hta_max_workers", "The most workers the run may have (--max-workers)",
                                    value=s.cap.max_workers)
            yield GaugeMetricFamily("hta_at_cap", "1 while every worker the cap allows is there or on its way "
                                    "and tasks still wait", value=1 if s.cap.at_cap else 0)
            yield GaugeMetricFamily("hta_held_back_workers", "Workers the last decision wanted and the cap (or the "
                                    "backend) held back", value=s.cap.held_back)
        p = s.plan
        if p is not None:
            for name, help_text, v in (
                    ("hta_deadline_seconds", "The deadline (--deadline), seconds from the run's start", p.deadline_s),
                    ("hta_projected_end_seconds", "When the plan's forecast sees the workflow end, seconds from the "
                     "run's start", p.projected_end_s),
                    ("hta_budget_node_seconds", "The budget (--budget), node-seconds of the worker shape's node",
                     p.budget_node_s),
                    ("hta_spent_node_seconds", "Node-seconds spent so far, by HTA's own count (what the plan "
                     "weighs against the budget)", p.spent_node_s)):
                if v is not None:
                    yield GaugeMetricFamily(name, help_text, value=v)


def make_registry(source: Callable[[], StatusSnapshot]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(source))
    return registry
