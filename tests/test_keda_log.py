"""What a KEDA poll costs, read from the operator's log as it writes it (no cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from testcluster.keda_log import poll_costs


def line(ts, msg, **fields):
    return json.dumps({"level": "info", "ts": ts, "logger": "scaleexecutor", "msg": msg,
                       "scaledJob.Name": fields.pop("job", "sj"), **fields})


def poll(t, running, pending, made=None, call_s=0.0, read_s=0.0, job="sj", ts=lambda t: t):
    out = [line(ts(t), "Scaling Jobs", **{"Number of running Jobs": running}, job=job),
           line(ts(t), "Scaling Jobs", **{"Number of pending Jobs": pending}, job=job)]
    if made is None:
        out.append(line(ts(t + read_s), "No need to create jobs - all requested jobs already exist", jobs=0, job=job))
    else:
        out += [line(ts(t + read_s), "Creating jobs", **{"Effective number of max jobs": made}, job=job),
                line(ts(t + read_s), "Creating jobs", **{"Number of jobs": made}, job=job),
                line(ts(t + read_s + made * call_s), "Created jobs", **{"Number of jobs": made}, job=job)]
    return out


def rfc3339nano(t: float) -> str:
    whole = datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{whole}.{round((t % 1) * 1e9):09d}Z"


def test_the_read_and_a_create_call_of_the_polls_made_while_jobs_ran(tmp_path):
    log = tmp_path / "keda-operator.log"
    lines = ["not json", json.dumps({"msg": "no time"}),
             # into an idle cluster: 60 Jobs in 1.5 s (the client's limiter): no loaded call
             *poll(1000.0, 0, 0, made=60, call_s=0.025, read_s=0.2, ts=rfc3339nano),
             *poll(1003.0, 60, 60, read_s=2.0, ts=rfc3339nano),
             *poll(1006.0, 50, 0, made=10, call_s=0.3, read_s=0.6, ts=rfc3339nano),
             *poll(1012.0, 52, 4, made=8, call_s=0.5, read_s=1.2, ts=rfc3339nano),
             # another ScaledJob's poll: not this one's
             *poll(1013.0, 5, 0, made=5, call_s=5.0, read_s=9.0, job="other", ts=rfc3339nano)]
    log.write_text("\n".join(lines) + "\n")
    c = poll_costs(log, "sj")
    assert c.polls == 4
    assert c.read_s == pytest.approx((0.2 + 2.0 + 0.6 + 1.2) / 4, abs=1e-6)
    assert c.create_call_s == pytest.approx((10 * 0.3 + 8 * 0.5) / 18, abs=1e-6)
    assert poll_costs(log).polls == 5  # every ScaledJob's


def test_whole_second_times_give_the_means_of_costs_near_a_second(tmp_path):
    def iso(t: float) -> str:  # (the operator's default: whole seconds)
        return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    log = tmp_path / "keda-operator.log"
    log.write_text("\n".join(poll(2000.0, 40, 0, made=6, call_s=0.5, read_s=1.0, ts=iso)) + "\n")
    c = poll_costs(log)
    assert c.read_s == pytest.approx(1.0) and c.create_call_s == pytest.approx(3 / 6)
    log.write_text("")
    assert poll_costs(log).read_s is None and poll_costs(log).create_call_s is None
