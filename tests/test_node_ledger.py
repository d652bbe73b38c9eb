"""Node·s as the cluster bills them (testcluster/node_ledger.py): from a node's launch to
its end, whichever autoscaler made it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from testcluster.node_ledger import LAUNCHED_AT, NodeLedger, NodeLife


def node(name: str, uid: str, created: float, annotations: dict | None = None):
    from datetime import UTC, datetime

    return SimpleNamespace(metadata=SimpleNamespace(name=name, uid=uid, annotations=annotations,
                                                    creation_timestamp=datetime.fromtimestamp(created, UTC)))


def test_a_node_is_paid_from_its_launch_to_its_deletion():
    ledger = NodeLedger(None)
    # the stand-in says when it decided the node; it registered 10 s later
    ledger._node("ADDED", node("a", "1", 110.0, {LAUNCHED_AT: "100.0"}))
    # a node with nothing said is paid from its creation
    ledger._node("ADDED", node("b", "2", 150.0))
    ledger.lives["1"].deleted = 200.0
    assert sorted(ledger.paid(until=300.0)) == [("a", 100.0, 200.0), ("b", 150.0, 300.0)]
    assert ledger.node_seconds(since=120.0, until=300.0) == pytest.approx(80.0 + 150.0)


def test_a_karpenter_node_is_paid_from_its_claim_and_a_claim_that_never_registered_too():
    ledger = NodeLedger(None)
    ledger.lives["1"] = NodeLife("n1", launched=105.0, deleted=180.0)  # registered 5 s after its claim
    ledger.claims = {"c1": [100.0, "n1", 185.0],  # the claim outlived the node by 5 s
                     "c2": [120.0, "", 130.0]}  # launched, consolidated before it registered
    assert sorted(ledger.paid(until=300.0)) == [("(never registered)", 120.0, 130.0), ("n1", 100.0, 185.0)]
    assert ledger.node_seconds(0.0, 300.0) == pytest.approx(85.0 + 10.0)


def test_the_ledger_is_settled_only_once_every_node_and_every_claim_has_gone():
    ledger = NodeLedger(None)
    ledger.lives["1"] = NodeLife("n1", launched=105.0, deleted=180.0)
    ledger.claims = {"c1": [100.0, "n1", None]}  # the node is gone, its claim not yet
    assert not ledger.settled()
    assert ledger.paid(until=300.0) == [("n1", 100.0, 300.0)]  # (paid to the end given)
    ledger.claims["c1"][2] = 185.0
    assert ledger.settled()
    ledger.lives["2"] = NodeLife("n2", launched=200.0)
    assert not ledger.settled()
