"""Golden decisions of the estimator and HTA's policy at today's defaults.

``tests/data/golden_estimates.json`` holds random observations (:mod:`hta.sim.scenarios`)
with what the estimator answered for each under a few option sets, and what HTA's default
policy and its ``hta-cost`` preset decided: a refactor of the estimator must give the same
answers (``tests/test_estimator_golden.py``). Two large generated queues are kept by their
generator's arguments and a digest of the answers.

A change of the estimator's rules changes its answers on purpose: regenerate the file with
``.venv/bin/python tests/golden_estimates.py`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

from hta.estimator import EstimatorOptions, QueueDrainEstimator
from hta.model import LatencyStats, Observation
from hta.policies.registry import make_policy
from hta.sim.scenarios import random_observation, scenario, upcoming_groups

PATH = Path(__file__).resolve().parent / "data" / "golden_estimates.json"
SEEDS = range(120)
#: option sets: today's defaults, the switches of the play, and hta-cost's tail awareness
OPTIONS: list[dict[str, Any]] = [
    {},
    {"lookahead": False},
    {"tail_aware": False},
    {"barrier_aware": False},
    {"lookahead": False, "tail_aware": False},
    {"busy_runtimes": 4, "busy_latencies": 2, "busy_latencies_runtime": "p90"},
]
POLICIES = ["hta", "hta-cost"]
#: (waiting tasks, workers, seed): large queues, kept by digest
LARGE = [(20_000, 300, 0), (100_000, 1_000, 1)]


def _r(x: float) -> float:
    return round(x, 6)


def estimate_fields(obs: Observation, horizon: float, options: dict[str, Any]) -> dict[str, Any]:
    e = QueueDrainEstimator(EstimatorOptions(**options)).estimate(obs, horizon)
    return {
        "left_waiting": [[g.category, g.count, g.request.cores, g.request.memory_mb, g.request.disk_mb]
                         for g in e.left_waiting],
        "unused_idle": sorted(e.unused_idle),
        "packed_need": e.packed_need,
        "workers_needed": e.workers_needed,
        "backlog_core_s": _r(e.backlog_core_s),
        "inflight": [[_r(c), _r(s)] for c, s in e.inflight],
        "releases": [[_r(t), n] for t, n in e.releases],
    }


def decision_fields(obs: Observation, horizon: float, spec: str) -> dict[str, Any]:
    seen = obs.model_copy(update={"latency": LatencyStats(samples=[horizon])})
    d = make_policy(spec).decide(seen)
    return {"add": d.add, "shape": None if d.shape is None else d.shape.model_dump(), "drain": sorted(d.drain),
            "next_decision_s": _r(d.next_decision_s), "target_workers": d.target_workers}


def answers(obs: Observation, horizon: float) -> dict[str, Any]:
    return {"estimates": [estimate_fields(obs, horizon, o) for o in OPTIONS],
            "decisions": {p: decision_fields(obs, horizon, p) for p in POLICIES}}


def large_observation(n: int, w: int, seed: int) -> Observation:
    big = scenario(n, w, seed=seed, integer_times=False)
    waiting = [g.model_copy(update={"id": f"g{k}"}) for k, g in enumerate(big.waiting)]
    upcoming = upcoming_groups(random.Random(seed), waiting, big.running, list(big.categories))
    return big.model_copy(update={"waiting": waiting, "upcoming": upcoming})


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def build() -> dict[str, Any]:
    cases = []
    for seed in SEEDS:
        obs, horizon = random_observation(seed)
        cases.append({"seed": seed, "horizon": horizon, "observation": obs.model_dump(mode="json", exclude_defaults=True),
                      "answers": answers(obs, horizon)})
    large = [{"args": [n, w, seed], "horizon": 157.0, "digest": digest(answers(large_observation(n, w, seed), 157.0))}
             for n, w, seed in LARGE]
    return {"options": OPTIONS, "policies": POLICIES, "cases": cases, "large": large}


if __name__ == "__main__":
    data = build()
    PATH.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {PATH} ({PATH.stat().st_size / 1e6:.1f} MB, {len(data['cases'])} cases)", file=sys.stderr)
