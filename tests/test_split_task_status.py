"""The fast read of ``/task_status`` (no model per waiting task) gives what the plain one
gives: the same non-waiting tasks and the same runs of waiting ones, on odd input too."""

import math
import random

import pytest

from workqueue_bridge.status_json import parse_task_status
from workqueue_bridge.task_table import split_task_status, waiting_segments

ODD = [None, 0, 1, 1.0, True, 2, "2", "", "x", -1, 1000, 2000.5, float("nan"), [1], {"a": 1}]


def raw_tasks(seed: int) -> list:
    rng = random.Random(seed)
    n = rng.randint(0, 300)
    ids = list(range(1, n + 1))
    rng.shuffle(ids)  # the master's order is not the id order
    out = []
    for tid in ids:
        state = rng.choice(["WAITING", "waiting", "RUNNING", "WAITING_RETRIEVAL", "DONE", "", None, 3])
        t = {"taskid": tid if rng.random() < 0.95 else str(tid), "state": state,
             "category": rng.choice(["a", "b", " a ", None, 7, "default"]),
             "address_port": rng.choice([None, "10.0.0.1:9123"]),
             "time_when_commit_start": rng.choice([0, 1_700_000_000_000_000])}
        for k in ("cores", "memory", "disk"):
            if rng.random() < 0.8:  # absent or declared
                t[k] = rng.choice(ODD) if rng.random() < 0.3 else rng.choice([1, 2, 1000])
        out.append(t)
    return out


def same(a, b) -> bool:
    """Segment lists equal, NaN-free by construction (declared() maps NaN to None)."""
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


@pytest.mark.parametrize("seed", range(200))
def test_split_equals_parse_then_segments(seed: int) -> None:
    data = raw_tasks(seed)
    tasks = parse_task_status(data)
    others, segments = split_task_status(data)
    assert others == [t for t in tasks if t.state != "waiting"]
    assert same(segments, waiting_segments(tasks))


def test_waiting_runs_merge_and_split_where_they_should() -> None:
    data = [{"taskid": i, "state": "WAITING", "category": "a", "cores": 1} for i in (3, 1, 2)]
    data += [{"taskid": 4, "state": "RUNNING", "category": "a", "cores": 1},
             {"taskid": 5, "state": "WAITING", "category": "a", "cores": 1},
             {"taskid": 6, "state": "WAITING", "category": "a", "cores": 2},
             {"taskid": 7, "state": "WAITING", "category": "a", "cores": [2]}]
    others, segments = split_task_status(data)
    assert [t.task_id for t in others] == [4]
    assert [(lo, hi, c, r.cores) for lo, hi, c, r in segments] == [(1, 3, "a", 1), (5, 5, "a", 1), (6, 6, "a", 2),
                                                                   (7, 7, "a", 0)]
    assert not math.isnan(segments[-1][3].memory_mb)
