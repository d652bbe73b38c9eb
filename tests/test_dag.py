"""DAG import with the real makeflow_viz, and the lookahead groups built from it."""

import shutil

from conftest import DATA

from hta.model import Resources
from workqueue_bridge.dag import load_dag, node_states, read_rules, sizes_in, upcoming_tasks
from workqueue_bridge.makeflow_log import MakeflowLog, NodeState


def test_dag_from_real_makeflow_viz(tmp_path):
    shutil.copy(DATA / "Makeflow.captured", tmp_path / "Makeflow")
    dag = load_dag(tmp_path / "Makeflow")
    assert [r.category for r in dag.rules] == ["align", "align", "align", "reduce"]
    assert dag.rules[0].request == Resources(cores=1, memory_mb=200, disk_mb=100)
    assert dag.rules[3].parents == [0, 1, 2] and dag.rules[0].parents == []


def test_blast_dag_has_three_chained_stages(blast_copy):
    dag = load_dag(blast_copy / "Makeflow")
    cats = [r.category for r in dag.rules]
    assert cats.count("align") == 12 + 1 + 4 and cats.count("split") == 3 and cats.count("reduce") == 3
    split2 = [r for r in dag.rules if r.category == "split"][1]
    parent = dag.rules[split2.parents[-1]]
    assert parent.category == "reduce"  # stage 2 splits what stage 1 reduced


def test_upcoming_groups_follow_node_states(tmp_path):
    shutil.copy(DATA / "Makeflow.captured", tmp_path / "Makeflow")
    dag = load_dag(tmp_path / "Makeflow")
    # nothing submitted: the three aligns wait for nothing, the reduce waits for their group
    up = upcoming_tasks(dag, {}, {}, set())
    assert [(u.category, u.count) for u in up] == [("align", 3), ("reduce", 1)]
    assert up[1].after == [up[0].id]
    # from the real run's log: jobs 1–3 submitted; say task 3 waits (group g0) and 1, 2 run
    events = MakeflowLog(DATA / "Makeflow.makeflowlog").poll()[:3]
    states = node_states(events)
    assert all(s == NodeState.RUNNING for s, _ in states.values())
    job_of = {n: j for n, (_, j) in states.items()}
    up = upcoming_tasks(dag, states, {job_of[0]: "g0"}, {job_of[1], job_of[2]})
    assert len(up) == 1 and up[0].category == "reduce"
    assert sorted(up[0].after) == sorted(["g0", f"task:{job_of[1]}", f"task:{job_of[2]}"])


def test_a_quoted_category_is_read_alike_by_the_lookahead_and_the_rule_reader(tmp_path):
    """makeflow_viz keeps the quotes of ``CATEGORY="quoted"``; the master does not. The
    lookahead and the rules named in messages (and in runtimes learned from makeflow's log)
    read one parse, so both say ``quoted``, as the master's tasks do."""
    (tmp_path / "Makeflow").write_text('CATEGORY="quoted"\nCORES=1\nMEMORY=300\n\nout.txt:\n\techo hi > out.txt\n')
    dag = load_dag(tmp_path / "Makeflow")
    rules = read_rules(tmp_path / "Makeflow")
    assert [r.category for r in dag.rules] == ["quoted"]
    assert [r.category for r in rules.values()] == ["quoted"]
    assert rules[0].limits == {"cores": 1, "memory": 300} and rules[0].outputs == ["out.txt"]


def test_shared_inputs_are_the_files_every_rule_of_a_category_reads(tmp_path):
    """A file every rule of a category reads (of two rules or more) is what a worker keeps in
    its cache for the next task of it; its size is read from the workflow's folder, and a
    file not there yet (a rule makes it) is left out."""
    (tmp_path / "Makeflow").write_text(
        "CATEGORY=align\n\n"
        "h1: db q1\n\tcat db q1 > h1\n\n"
        "h2: db q2 made\n\tcat db q2 > h2\n\n"
        "h3: db q3 made\n\tcat db q3 > h3\n\n"
        "CATEGORY=one\n\nout: db\n\tcat db > out\n\n"
        "CATEGORY=make\n\nmade:\n\ttouch made\n")
    dag = load_dag(tmp_path / "Makeflow")
    assert dag.rules[0].inputs == ["db", "q1"]
    assert dag.shared_inputs() == {"align": ["db"]}  # ("one" has one rule; "made" is not read by h1)
    (tmp_path / "db").write_bytes(b"x" * 2**20)
    assert dag.shared_input_sizes(sizes_in(tmp_path)) == {"align": {"db": 1.0}}
    assert dag.shared_input_sizes(sizes_in(tmp_path / "elsewhere")) == {}
