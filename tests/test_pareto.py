"""The Pareto bench's dominance logic and goals (:mod:`bench.evaluation.pareto`), on hand-made points (no simulation)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from bench.evaluation import file_order, pareto
from bench.evaluation import worker_shape as ws
from hta.policies.hta_policy import PRESETS

ROOT = Path(__file__).resolve().parent.parent
P = pareto.Point


def test_dominance_is_on_the_time_and_the_bill_with_2_percent_runtime_slack():
    r = P("rival", runtime_s=1000, waste_core_s=500, node_s=9000)
    assert pareto.dominates(P("h", 1020, 500, 9000), r)  # runtime within 1.02 ×, ties elsewhere
    assert not pareto.dominates(P("h", 1021, 100, 100), r)  # slower than 1.02 ×
    assert pareto.dominates(P("h", 900, 501, 100), r)  # more waste: no axis (a per-task pod has none inside)
    assert not pareto.dominates(P("h", 900, 100, 9001), r)  # more node·s


def test_undominated_lists_rivals_no_hta_setting_beats_and_leaves_unfinished_ones_out():
    htas = [P("hta", 1000, 100, 5000), P("hta-time", 900, 300, 8000)]
    rivals = [P("slow-cheap", 5000, 50, 3000), P("beaten", 950, 400, 9000), P("fast", 800, 1000, 20000),
              P("never-ends", 100, 1, 1, unfinished=1)]
    free = pareto.undominated(rivals, htas)
    assert [r.label for r in free] == ["slow-cheap", "fast"]
    why = pareto.losses(htas[0], free[0])
    assert why == ["node·s 5,000 > 3,000"]
    assert pareto.losses(htas[1], free[1]) == ["runtime 900 > 1.02 × 800 = 816 s"]


@pytest.fixture
def settings():
    """The default is fast and dear; "mid", "cheap" and "slow" each dominate rivals of their own."""
    return {"hta": P("hta", 100, 50, 900), "mid": P("mid", 200, 20, 500), "cheap": P("cheap", 400, 5, 200),
            "slow": P("slow", 900, 1, 190)}


def test_covers_rank_pairs_by_cases_left_then_rivals_and_name_what_each_leaves(settings):
    cases = {
        "w/cap": ([P("r-mid", 210, 30, 600), P("r-mid2", 205, 25, 550), P("r-cheap", 500, 10, 300),
                   P("r-fast", 99, 60, 950)], settings),  # (only the default dominates r-fast: it always counts)
        "w/unc": ([P("r-none", 50, 1, 10), P("r-slow", 950, 2, 195), P("r-slow2", 920, 3, 185)], settings),
    }
    pairs = pareto.covers(cases, ["mid", "cheap", "slow"])
    # one case left beats two, however many rivals it holds; then fewer rivals
    assert [(c.settings, c.cases_left, c.rivals_left) for c in pairs] == [
        (("mid", "cheap"), 1, 3), (("mid", "slow"), 2, 3), (("cheap", "slow"), 2, 4)]
    assert pairs[0].left == {"w/cap": [], "w/unc": ["r-none", "r-slow", "r-slow2"]}
    assert pairs[2].left == {"w/cap": ["r-mid", "r-mid2"], "w/unc": ["r-none", "r-slow2"]}
    assert [pareto.rank(c, pairs) for c in pairs] == [1, 2, 3]
    singles = pareto.covers(cases, ["mid", "cheap", "slow"], size=1)
    assert [(c.settings, c.cases_left, c.rivals_left) for c in singles] == [
        (("mid",), 2, 4), (("cheap",), 2, 5), (("slow",), 2, 5)]
    assert [pareto.rank(c, singles) for c in singles] == [1, 2, 2]  # a tie shares its rank


def test_the_ranking_gives_the_presets_rank_the_best_single_setting_and_the_cases_no_pair_clears(settings, capsys):
    cases = {"w/cap": ([P("r-mid", 210, 30, 600), P("r-cheap", 500, 10, 300)], settings),
             "w/unc": ([P("r-none", 50, 1, 10), P("r-slow", 950, 2, 195)], settings)}
    pareto.print_covers(cases, ["slow", "mid"], top=1)
    out = capsys.readouterr().out
    assert "which two of the 3 HTA settings run beside the default" in out
    assert "\n  #1 mid and cheap: 2 rival setting(s) on 1 case(s): w/unc 2\n" in out
    # (mid, slow) ties with (cheap, slow): both second
    assert "\n  the presets, slow and mid (#2 of 3): 2 rival setting(s) on 2 case(s): w/cap 1, w/unc 1\n" in out
    assert "\n  the best one setting alone: cheap: 3 rival setting(s) on 2 case(s): w/cap 1, w/unc 2\n" in out
    assert "\n  no pair clears w/unc; no setting run dominates w/unc: r-none\n" in out
    pareto.print_covers(cases, ["slow"], top=1)  # one preset: its best partner
    assert "\n  the preset slow at its best, with cheap (#2 of 3): " in capsys.readouterr().out
    # a case no pair clears, though each of its rivals falls to some setting: no empty list is printed
    cases["w/unc"] = ([P("r-slow", 950, 2, 195), P("r-mid3", 210, 30, 600)], settings)
    pareto.print_covers(cases, ["slow", "mid"], top=1)
    out = capsys.readouterr().out
    assert "\n  no pair clears" not in out  # (mid, slow) clears both
    cases["w/unc"] = ([P("r-slow", 950, 2, 195), P("r-cheap2", 500, 10, 300), P("r-mid3", 210, 30, 600)], settings)
    pareto.print_covers(cases, ["slow", "mid"], top=1)
    assert "\n  no pair clears w/unc\n" in capsys.readouterr().out


def test_short_labels_name_what_a_tuned_setting_changes():
    assert [pareto.short_label(s) for s in ("hta:busy_runtimes=3", "hta-cost:busy_runtimes=3,unmeasured_per_worker=5",
                                             "hta:worker_shape=learned,probe_split=3,busy_runtimes=2",
                                             "hta-cost:busy_latencies=0", "hta:worker_shape=node",
                                             "hta:probe_split=1")] == [
        "busy 3", "hta-cost, busy 3, unmeasured 5", "probes, busy 2", "hta-cost, latencies 0", "whole nodes",
        "no probes"]


def test_points_that_sit_together_share_one_label_on_a_front():
    M = pareto.Mark
    marks = [M(100.0, 50.0, "factory-2x60s", 6), M(100.0, 50.0, "factory-3x60s", 6),
             M(100.5, 50.2, "hta-cost", 8, "bold"),  # 0.5 % away: drawn over them, so joined (≈: not all alike)
             M(200.0, 50.0, "keda-job-10", 6), M(100.0, 60.0, "hpa-80", 6)]  # 2x and 20 % away: apart
    out = pareto.labels_of(marks)
    assert [m.text for m in out] == ["factory-2x60s ≈ factory-3x60s ≈ hta-cost", "keda-job-10", "hpa-80"]
    assert (out[0].node_s, out[0].runtime_s, out[0].size, out[0].weight) == (100.0, 50.0, 8, "bold")
    many = pareto.labels_of([M(1.0, 1.0, f"setting-{i}", 7) for i in range(12)])
    assert len(many) == 1
    lines = many[0].text.split("\n")
    assert len(lines) > 1 and all(len(x) <= pareto.LABEL_LINE for x in lines)
    assert " = ".join(x.removesuffix(" =") for x in lines) == " = ".join(f"setting-{i}" for i in range(12))


def test_every_seed_weighs_alike_however_long_its_workflow():
    # Montage seed 2 draws one 44,657 s task: its critical path and bound are ten times the
    # others'. A plain mean of seconds is that seed's; scaled, each seed counts as much
    sizes = [(4000, 150e3), (5000, 150e3), (46000, 190e3), (2000, 145e3), (1500, 140e3)]
    scales = pareto.seed_scales(sizes)
    assert [n * k.time for (n, _), k in zip(sizes, scales)] == pytest.approx([4000] * 5)  # the median length
    assert [w * k.cost for (_, w), k in zip(sizes, scales)] == pytest.approx([150e3] * 5)  # the median work
    bounds = [n + 100 for n, _ in sizes]
    ratios = (1.4, 1.3, 1.05, 1.7, 1.7)
    hta = [{"runtime_s": b * r, "waste_core_s": 0, "node_s": 200e3, "waste_after_core_s": 0,
            "shortage_core_s": 0, "finished": True} for b, r in zip(bounds, ratios)]
    plain, weighed = pareto.mean_point("hta", hta), pareto.mean_point("hta", hta, scales)
    assert plain.runtime_s / (sum(bounds) / 5) < 1.15  # the long seed's 1.05 × hides the rest
    from hta.sim.oracle import NodeSecondsFloor

    floor = NodeSecondsFloor(busy_node_s=100, work_node_s=100, start_nodes=1, latency_s=140, runtime_bound_s=150)
    bound, floors, fifos = pareto.scale_references(scales, bounds, [floor] * 5, [b * 1.1 for b in bounds])
    assert [f.runtime_bound_s for f in floors] == pytest.approx([150 * k.time for k in scales])
    assert weighed.runtime_s / bound == pytest.approx(1.42, abs=0.03)  # near the mean ratio, 1.43
    assert statistics.fmean(fifos) / bound == pytest.approx(1.1)  # a list schedule scaled alike
    # costs by work, not by length: the long seed's node·s are not blown up, nor the short ones'
    assert weighed.node_s == pytest.approx(statistics.fmean(200e3 * k.cost for k in scales))
    assert min(r["node_s"] for r in hta) * 0.7 < weighed.node_s < max(r["node_s"] for r in hta) * 1.1
    assert pareto.seed_scales([(600, 1e4), (600, 1e4)]) == [pareto.SeedScale(), pareto.SeedScale()]
    with pytest.raises(ValueError):
        pareto.mean_point("hta", hta, scales[:2])  # one scale a run
    with pytest.raises(ValueError, match="no critical path or no work"):
        pareto.seed_scales([(0, 1e4), (600, 1e4)])


def test_the_bench_weighs_seeds_alike_end_to_end(tmp_path, capsys, monkeypatch):
    # main() itself: three seeds, one five to ten times as long; its printed ratio to the bound is the
    # mean of the seeds' ratios (what each seed's runtimes and bound, scaled alike, give)
    from hta.sim.workload import SimTask, Workload

    def wl(name, seed, tasks, folder):  # a chain the starting node runs: its bound is its length
        n = (10_000, 1000, 2000)[seed]  # three tasks of 10,000 s, 1,000 s or 2,000 s
        return Workload("w", [SimTask("a", "a", n), SimTask("b", "a", n, parents=["a"]),
                              SimTask("c", "a", n, parents=["b"])], declared=True)

    monkeypatch.setattr(pareto, "workload", wl)
    def run_one(name, wl, spec, cluster, seed, bound):  # 1.1, 1.5 and 1.2 × its bound
        return {"runtime_s": (1.1, 1.5, 1.2)[seed] * bound, "waste_core_s": 0.0, "waste_after_core_s": 0.0,
                "node_s": 100.0, "shortage_core_s": 0.0, "finished": True}
    monkeypatch.setattr(pareto, "run_one", run_one)
    pareto.main(["--seeds", "3", "--workloads", "io-bound", "--clusters", "cap20", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "each seed's times × median critical path / its own" in out
    line = next(x for x in out.splitlines() if "reference, not a goal: the lower bound" in x)
    # per seed 1.1, 1.5 and 1.2 × against bounds 5–10 × apart: the plain mean would say 1.15 ×
    import re

    got = re.search(r"HTA default ([0-9.]+) × it \(per seed ([0-9.]+)–([0-9.]+) ×\)", line)
    assert got, line
    mean, lo, hi = (float(x) for x in got.groups())
    assert (lo, hi) == pytest.approx((1.1, 1.5), abs=0.01) and mean == pytest.approx(3.8 / 3, abs=0.01)


def test_other_presets_are_held_against_the_rivals_in_place_of_htas_own(tmp_path, capsys, monkeypatch):
    # --preset: HTA's default and the user's settings (at most two, HTA's own) take the place of
    # hta-time and hta-cost, so whether other presets would meet the goals is one command
    from hta.sim.workload import SimTask, Workload

    monkeypatch.setattr(pareto, "workload", lambda name, seed, tasks, folder: Workload(
        "w", [SimTask("a", "a", 100.0)], declared=True))
    def run_one(name, wl, spec, cluster, seed, bound):  # rivals: slow and mid-priced; HTA's own: fast, dear
        runtime, node_s = {"hta-cost:busy_runtimes=3": (1.5, 300.0)}.get(spec, (1.0, 1000.0) if spec.startswith(
            "hta") else (1.0, 2000.0) if spec.startswith(("max-then-drain", "static")) else (2.0, 500.0))
        return {"runtime_s": runtime * bound, "waste_core_s": node_s / 10, "waste_after_core_s": 0.0,
                "node_s": node_s, "shortage_core_s": 0.0, "finished": True}
    monkeypatch.setattr(pareto, "run_one", run_one)
    argv = ["--seeds", "1", "--workloads", "io-bound", "--clusters", "cap20", "--out", str(tmp_path)]
    assert pareto.main(argv) == 1
    out = capsys.readouterr().out
    n = len(pareto.rivals(20))  # every rival setting at every shape
    assert n == 3 * 26 and f"\n  {n - 6} of {n} rival settings not dominated by HTA's default and presets" in out
    assert "which two of the" not in out  # (the ranking needs --sweep's settings)
    pareto.main([*argv, "--preset", "hta-cost:busy_runtimes=3", "--markdown", str(tmp_path / "s.md")])
    out = capsys.readouterr().out
    assert f"\n  0 of {n} rival settings not dominated by HTA's default and --preset settings" in out
    assert "HTA's presets replaced by hta-cost:busy_runtimes=3" in out
    assert "| hta | hta-cost:busy_runtimes=3 | max-then-drain [learned] |" in (tmp_path / "s.md").read_text()
    table = [x for x in (tmp_path / "s.md").read_text().splitlines() if x.startswith("|")]
    assert len(table) == 3 and len({x.count("|") for x in table}) == 1  # every row fills every column
    assert "| hta runtime / max-then-drain [learned] ≤ 1.02 |" in table[0]
    # a setting is known by what it is: hta-cost's own settings are hta-cost (its stored runs, its name)
    assert list(pareto.preset_settings(None, [f"hta:{PRESETS['hta-cost']}", "hta-cost:busy_runtimes=3"])) == [
        "hta", "hta-cost", "hta-cost:busy_runtimes=3"]
    pareto.main([*argv, "--sweep", "--preset", "hta-cost:busy_runtimes=3"])  # a tuned setting made a preset
    out = capsys.readouterr().out
    assert "\n  H hta-cost:busy_runtimes=3 " in out and "\n  h hta-cost:busy_runtimes=3 " not in out
    # --sweep also ranks pairs of the settings run: any pair with the one that beats every rival clears all
    assert f"which two of the {len(pareto.SWEEP)} HTA settings run beside the default" in out
    assert "\n  #1 hta-cost:busy_runtimes=3 and " in out and ": 0 rival setting(s) on 0 case(s)\n" in out
    assert "\n  the preset hta-cost:busy_runtimes=3 at its best, with " in out
    assert "no pair clears" not in out
    for bad, says in ((["max-then-drain"], "not an HTA setting"), (["hta:busy_runtimes=0"], "busy_runtimes must be"),
                      (["hta-time", "hta-cost", "hta:busy_runtimes=2"], "at most two settings"),
                      (["hta:"], "the same setting as hta"), (["hta-time:tail_aware=false", "hta-time"], "as hta-time")):
        with pytest.raises(SystemExit) as e:
            pareto.main([*argv, *(x for spec in bad for x in ("--preset", spec))])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and says in err[-1] and "Traceback" not in "".join(err)


def test_rivals_can_be_cut_to_some_names_and_must_keep_the_reference(tmp_path, capsys, monkeypatch):
    from hta.sim.workload import SimTask, Workload

    monkeypatch.setattr(pareto, "workload", lambda name, seed, tasks, folder: Workload(
        "w", [SimTask("a", "a", 100.0)], declared=True))
    ran: set[str] = set()

    def run_one(name, wl, spec, cluster, seed, bound):
        ran.add(spec)
        return {"runtime_s": bound, "waste_core_s": 0.0, "waste_after_core_s": 0.0, "node_s": 100.0,
                "shortage_core_s": 0.0, "finished": True}
    monkeypatch.setattr(pareto, "run_one", run_one)
    argv = ["--seeds", "1", "--workloads", "io-bound", "--clusters", "cap20", "--out", str(tmp_path)]
    pareto.main([*argv, "--rivals", "max-then-drain,static"])
    rivals = {s for s in ran if not s.startswith("hta")}
    assert len(rivals) == 6 and all(s.startswith(("max-then-drain", "static")) for s in rivals)
    assert "\n  0 of 6 rival settings not dominated" in capsys.readouterr().out
    for bad, says in (("bogus", "no rival setting starts with bogus"), ("static", "keep max-then-drain")):
        with pytest.raises(SystemExit) as e:
            pareto.main([*argv, "--rivals", bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and says in err[-1]


def test_a_stored_run_of_a_preset_defined_otherwise_since_is_run_again(tmp_path):
    made = []
    def make():
        made.append(1)
        return {"runtime_s": float(len(made))}
    key = ("io-bound", "cap20", "hta-cost", 0)
    old = pareto.settings_of("hta-cost:busy_runtimes=3")  # what "hta-cost" stood for when it ran
    assert old != pareto.settings_of("hta-cost") and pareto.settings_of("hpa-20") is None
    store = pareto.Store(tmp_path / "runs.jsonl")
    assert store.get(key, make, settings=old)["runtime_s"] == 1
    assert store.get(key, make, settings=old)["runtime_s"] == 1 and len(made) == 1  # kept
    assert store.get(key, make, settings=pareto.settings_of("hta-cost"))["runtime_s"] == 2  # run again
    again = pareto.Store(tmp_path / "runs.jsonl")  # a second call reads the newer line
    assert again.get(key, make, settings=pareto.settings_of("hta-cost"))["runtime_s"] == 2 and len(made) == 2
    assert again.get(("io-bound", "cap20", "hpa-20", 0), make)["runtime_s"] == 3  # a rival: no settings
    assert again.get(("io-bound", "cap20", "hpa-20", 0), make)["runtime_s"] == 3 and len(made) == 3
    with (tmp_path / "runs.jsonl").open("a") as f:  # a line stored before runs said what they ran
        f.write(json.dumps({"workload": "io-bound", "cluster": "cap20", "label": "hta", "seed": 0,
                            "tasks": 600, "runtime_s": 99.0}) + "\n")
    old_line = pareto.Store(tmp_path / "runs.jsonl")
    assert old_line.get(("io-bound", "cap20", "hta", 0), make, settings=pareto.settings_of("hta"))["runtime_s"] == 4


def test_a_run_stored_before_waste_counted_measured_cores_is_run_again(tmp_path):
    made = []
    def make():
        made.append(1)
        return {"waste_core_s": float(len(made))}
    path, key = tmp_path / "runs.jsonl", ("io-bound", "cap20", "hpa-20", 0)
    path.write_text(json.dumps({"workload": "io-bound", "cluster": "cap20", "label": "hpa-20", "seed": 0,
                                "tasks": 600, "waste_core_s": 99.0}) + "\n")  # no "accounting": the first
    store = pareto.Store(path)
    assert store.outdated == {key}
    assert store.get(key, make)["waste_core_s"] == 1 and len(made) == 1
    assert json.loads(path.read_text().splitlines()[-1])["accounting"] == pareto.ACCOUNTING
    again = pareto.Store(path)
    assert not again.outdated and again.get(key, make)["waste_core_s"] == 1 and len(made) == 1  # kept now


@pytest.mark.parametrize("flag, world, title, key", [
    # --declared: the workloads' tasks declare their cores and memory (no whole-worker first wave)
    ("--declared", lambda wl, cluster: wl.declared, ", every task declared", {"declared": True, "whole_worker": True}),
    # --packed: measured allocations, several measured tasks a worker (no whole worker once measured)
    ("--packed", lambda wl, cluster: cluster.auto_allocation, ", measured tasks packed at their peak", {}),
])
def test_runs_in_another_world_are_run_there_and_stored_apart(tmp_path, capsys, monkeypatch, flag, world, title, key):
    # every run (fixed sizes too) is made in that world; its runs are kept apart from the
    # same store's others, and reused
    from hta.sim.workload import SimTask, Workload

    monkeypatch.setattr(pareto, "workload", lambda name, seed, tasks, folder: Workload("w", [SimTask("a", "a", 100.0)]))
    seen = []
    def run_one(name, wl, spec, cluster, seed, bound):
        seen.append(world(wl, cluster))
        return {"runtime_s": bound, "waste_core_s": 1.0, "waste_after_core_s": 0.0, "node_s": 10.0,
                "shortage_core_s": 0.0, "finished": True}
    monkeypatch.setattr(pareto, "run_one", run_one)
    argv = ["--seeds", "1", "--workloads", "io-bound", "--clusters", "cap20", "--out", str(tmp_path)]
    pareto.main([*argv, flag])
    assert seen and all(seen) and f"{title}, mean of 1 seed(s)" in capsys.readouterr().out
    lines = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    # (a line says the world it was run in; one without whole_worker was run packed)
    assert lines and all({k: d.get(k, False) for k in ("declared", "whole_worker")} == {
        "declared": False, "whole_worker": False, **key} for d in lines)
    n = len(seen)
    pareto.main([*argv, flag])
    assert len(seen) == n  # all reused
    pareto.main(argv)
    assert len(seen) == 2 * n and not any(seen[n:])  # the default world's runs are others
    default = pareto.Store(tmp_path / "runs.jsonl", whole_worker=True)
    assert pareto.Store(tmp_path / "runs.jsonl", **{"whole_worker": False, **key}).runs.keys() == default.runs.keys()


def test_goals_hold_hta_against_max_then_drain_with_the_same_pods():
    mtd = P("max-then-drain [learned]", 1000, 1000, 10000)
    met = pareto.goals(P("hta", 1020, 100, 7500), mtd, capped=False)
    assert [g.met for g in met] == [True, True] and [g.ratio for g in met] == ["1.020", "0.75"]
    missed = pareto.goals(P("hta", 1021, 100, 7501), mtd, capped=False)
    assert [g.met for g in missed] == [False, False]
    # a miss by less than the printed digits shows enough of them to be seen as one
    assert "(1.021 ×)" in missed[0].figures and "(0.7501 ×)" in missed[1].figures and "≤ 0.75 ×" in missed[1].text
    # under the cap every sensible policy buys the cap at once: no more node·s than it, not 25 % fewer
    capped = pareto.goals(P("hta", 1000, 100, 10000), mtd, capped=True)
    assert [g.met for g in capped] == [True, True] and "≤ 1 ×" in capped[1].text
    over = pareto.goals(P("hta", 1000, 100, 10002), mtd, capped=True)[1]
    assert not over.met and over.ratio == "1.0002"


def test_no_static_pool_asked_for_at_t0_is_faster_and_cheaper_than_hta():
    hta = P("hta", 1000, 100, 10000)
    slow_cheap = P("static pool 5 nodes [1-core]", 3000, 100, 6000)    # slower: no goal on it
    fast_dear = P("static pool 20 nodes [1-core]", 900, 100, 40000)    # faster, dearer: fine
    assert pareto.pool_goal(hta, [slow_cheap, fast_dear]).met
    both = P("static pool 10 nodes [learned]", 990, 100, 9990)         # faster and cheaper
    g = pareto.pool_goal(hta, [slow_cheap, both])
    assert not g.met and "static pool 10 nodes [learned]" in g.figures and "faster and cheaper" in g.figures
    # as fast (within 1.02 ×) and HTA pays more than 1.10 × its node·s
    near = P("static pool 10 nodes [1-core]", 1015, 100, 9000)
    g = pareto.pool_goal(hta, [near])
    assert not g.met and g.ratio == "1.11"
    assert pareto.pool_goal(hta, [P("static pool 10 nodes [1-core]", 1015, 100, 9200)]).met


def test_rivals_run_at_every_shape_with_their_counts_in_workers_of_it():
    from hta.policies import make_policy
    from hta.policies.pod_shape import PodShaped

    r = pareto.rivals(20, node_cores=3.0)
    assert r["max-then-drain [node]"] == "max-then-drain"
    assert r["max-then-drain [1-core]"] == "max-then-drain[pods=3]"
    assert r[pareto.MTD_SAME_PODS] == "max-then-drain[pods=learned]"
    assert "max_replicas=20" in r["keda-job-1 [node]"] and "max_replicas=60" in r["keda-job-1 [1-core]"]
    assert "strategy=eager" in r["keda-job-3 eager [learned]"]
    p = make_policy(r["hpa-50 [1-core]"])
    assert isinstance(p, PodShaped) and p.pods == 3


def test_a_store_cut_short_is_one_usage_line(tmp_path, capsys):
    (tmp_path / "runs.jsonl").write_text('{"workload": "io-bound", "cluster": "cap20", "label": "hta", "seed": 0}\n{"work')
    with pytest.raises(SystemExit) as e:
        pareto.main(["--workloads", "io-bound", "--seeds", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "runs.jsonl, line 2, is not a stored run" in err and "Traceback" not in err


def test_worker_shape_bench_names_each_shape_by_what_differs_from_the_settings_own():
    """hta-cost is probe-shaped of its own: its whole-node run must say so, or the
    worker-shape bench would compare hta-cost's probes with themselves."""
    from hta.policies import make_policy

    for setting in ws.SETTINGS:
        for shape, (worker_shape, probe_split) in ws.SHAPES.items():
            p = make_policy(ws.shaped(setting, shape))
            assert p.worker_shape == worker_shape, (setting, shape)
            assert p.probe_split == probe_split or worker_shape == "node", (setting, shape)
    assert ws.DEFAULT_SHAPE == "probe"
    assert ws.shaped("hta", "probe") == "hta" and ws.shaped("hta-cost", "probe") == "hta-cost"
    assert ws.shaped("hta", "node") == "hta:worker_shape=node"
    assert ws.shaped("hta:busy_runtimes=3", "learned") == "hta:busy_runtimes=3,probe_split=1"


def _file_order():
    return file_order


def test_file_order_bench_sorts_the_rules_longest_tail_first_by_what_each_order_knows():
    """bench/file_order.py: 'by task' reads each task's own runtime, 'by category' its
    category's mean (there y and x1 tie at 25, so they keep the file's order), 'as
    written' leaves the workflow as it is."""
    from hta.sim.workload import SimTask, Workload

    fo = _file_order()
    wl = Workload("w", [SimTask("y", "y", 25), SimTask("x2", "x", 10), SimTask("x1", "x", 30),
                        SimTask("c1", "c", 5, parents=["x1"])])
    assert fo.ordered(wl, "as written") is wl
    assert [t.id for t in fo.ordered(wl, "by task").tasks] == ["x1", "y", "x2", "c1"]  # 35, 25, 10, 5
    assert [t.id for t in fo.ordered(wl, "by category").tasks] == ["y", "x1", "x2", "c1"]  # 25, 20 + 5, 20, 5


@pytest.mark.slow
def test_file_order_bench_prints_a_line_per_case(capsys):
    assert _file_order().main(["--seeds", "1", "--cases", "io-bound:2"]) == 0
    out = capsys.readouterr().out
    assert "io-bound/2" in out and out.count(" × (") == 3 and "within 1.1 × the bound: as written " in out


def test_the_dial_goal_asks_its_deadlines_kept_and_its_bill_never_rising():
    P = pareto.Point
    falling = [P("a", 100, 0, 300), P("b", 150, 0, 250), P("c", 200, 0, 250)]
    assert pareto.dial_goal(falling, 19, 20).met  # 95 % kept
    assert not pareto.dial_goal(falling, 18, 20).met
    rising = [P("a", 100, 0, 300), P("b", 150, 0, 310)]  # 3.3 % more for a looser deadline
    goal = pareto.dial_goal(rising, 10, 10)
    assert not goal.met and "300 → 310" in goal.figures and "1.033" in goal.figures


def test_a_dial_left_off_leaves_the_stored_runs_of_htas_settings_valid():
    assert pareto.settings_of("hta") == pareto.settings_of("hta:deadline_s=0")
    assert "deadline_s" not in pareto.settings_of("hta")
    assert "deadline_s': 60.0" in pareto.settings_of("hta:deadline_s=60")
