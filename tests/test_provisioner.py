"""The node-provisioner stand-in (the test cluster's cluster-autoscaler) never buys past
``max_nodes``, nor twice for the same pods, when nodes it asked for land while it looks.

On a loaded machine the small replay's cluster, capped at 5 nodes, grew to 7: a step
listed the nodes, then the nodes on their way landed (and stopped counting as coming)
before it counted them, so it saw neither. The runs it paid 40 % more node·s for failed
the replay's calibration. The race needs a node to land at one exact moment, so these
tests drive the stand-in against an in-memory fake of the few Kubernetes API calls it
makes (``FakeCoreApi``); the real cluster runs it in ``tests/test_k8s.py`` and the replay.
"""

from __future__ import annotations

from kubernetes import client

from testcluster.provisioner import Config, Provisioner


def _node(name: str, cores: int = 3) -> client.V1Node:
    cap = {"cpu": str(cores), "memory": "16384Mi"}
    return client.V1Node(metadata=client.V1ObjectMeta(name=name), status=client.V1NodeStatus(allocatable=cap))


def _pod(name: str, node: str | None) -> client.V1Pod:
    res = client.V1ResourceRequirements(requests={"cpu": "1", "memory": "1000Mi"})
    cond = [] if node else [client.V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable")]
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, uid=name),
                        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="w", resources=res)]),
                        status=client.V1PodStatus(phase="Running" if node else "Pending", conditions=cond))


class FakeCoreApi:
    """A fake of the API server's node and pod lists (named as such: the race below needs
    nodes to land between two calls, which a real server cannot be made to do on cue).
    ``land_after_listing`` nodes are added, and the provisioner told they arrived, just
    after the next node listing returns."""

    def __init__(self, nodes: list[client.V1Node], pods: list[client.V1Pod]):
        self.nodes, self.pods = nodes, pods
        self.created: list[str] = []
        self.land_after_listing: list[client.V1Node] = []
        self.provisioner: Provisioner | None = None

    def list_pod_for_all_namespaces(self):
        return client.V1PodList(items=list(self.pods))

    def list_node(self, label_selector: str = ""):
        listed = client.V1NodeList(items=list(self.nodes))
        landing, self.land_after_listing = self.land_after_listing, []
        for n in landing:  # as _provision_later's threads do when their delay is over
            self.nodes.append(n)
            with self.provisioner.lock:
                self.provisioner.provisioning -= 1
        return listed

    def create_node(self, body: client.V1Node):
        self.created.append(body.metadata.name)
        self.nodes.append(body)


def _provisioner(api: FakeCoreApi, max_nodes: int = 5) -> Provisioner:
    p = Provisioner(Config(node_cores=3, node_memory=16384, max_nodes=max_nodes, start_nodes=1, delay=3600,
                           jitter=0, empty_ttl=3600), api)
    api.provisioner = p
    return p


def test_nodes_landing_while_a_step_looks_are_not_bought_again():
    # one full starting node, 12 one-core pods waiting for the 4 nodes already coming
    pods = [_pod(f"on-{i}", "start") for i in range(3)] + [_pod(f"w-{i}", None) for i in range(12)]
    api = FakeCoreApi([_node("start")], pods)
    p = _provisioner(api)
    p.provisioning = 4
    api.land_after_listing = [_node(f"new-{i}") for i in range(4)]
    try:
        p.step()
        assert p.provisioning == 0, "bought again for pods the landed nodes hold (and past max_nodes)"
        p.step()  # the next look sees the nodes, with room for every waiting pod
        assert p.provisioning == 0 and api.created == []
    finally:
        p.stop.set()  # any node bought waits on this and is never added


def test_a_step_still_buys_what_the_nodes_coming_do_not_hold():
    pods = [_pod(f"on-{i}", "start") for i in range(3)] + [_pod(f"w-{i}", None) for i in range(9)]
    api = FakeCoreApi([_node("start")], pods)
    p = _provisioner(api)
    p.provisioning = 1  # holds 3 of the 9 waiting pods
    try:
        p.step()
        assert p.provisioning == 3  # 2 more nodes, 4 in all beside the starting one
    finally:
        p.stop.set()


def test_no_node_is_added_past_max_nodes():
    api = FakeCoreApi([_node(f"n-{i}") for i in range(5)], [])
    p = _provisioner(api, max_nodes=5)
    p.add_node()
    assert api.created == [] and len(api.nodes) == 5
    api.nodes.pop()
    p.add_node()
    assert len(api.created) == 1 and len(api.nodes) == 5
