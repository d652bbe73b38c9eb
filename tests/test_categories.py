"""Category learning from resource-monitor summaries."""

from conftest import DATA

from hta.model import Resources
from resource_monitor.categories import CategoryLearner, first_allocation
from workqueue_bridge.monitor_summaries import SummaryDirectory, TaskSummary


def s(cat, wall, cores=0.5, mem=10, disk=1, status=0):
    return TaskSummary(category=cat, wall_time_s=wall, cores=cores, memory_mb=mem, disk_mb=disk,
                       exit_status=status, exit_type="normal")


def test_peaks_and_runtime_distribution():
    L = CategoryLearner()
    for i, wall in enumerate([10, 20, 30, 40, 50, 60, 70, 80, 90, 100]):
        L.add(s("align", wall, cores=0.2 + i * 0.1, mem=100 + i, disk=5))
    m = L.model("align")
    assert m.samples == 10 and m.measured
    assert m.peak == Resources(cores=2, memory_mb=109, disk_mb=5)  # 1.1 peak cores → 2 whole cores
    assert m.runtime_mean_s == 55 and m.runtime_median_s == 55 and m.runtime_p90_s == 90
    assert m.runtime_min_s == 10 and m.runtime_max_s == 100
    # the distribution the estimator uses: linear between min, median, p90 and max
    assert m.runtime_quantile(0.25) == 32.5 and m.runtime_quantile(0.95) == 95 and m.runtime_quantile(1) == 100


def test_failed_tasks_teach_peaks_not_runtimes():
    L = CategoryLearner()
    L.add(s("x", 5, mem=900, status=1))
    m = L.model("x")
    assert not m.measured and m.peak.memory_mb == 900


def test_never_seen_category_gets_a_whole_worker():
    worker = Resources(cores=4, memory_mb=8000, disk_mb=10000)
    L = CategoryLearner()
    assert first_allocation(L.model("new"), worker) == worker
    L.add(s("new", 3, cores=0.9, mem=50, disk=2))
    assert first_allocation(L.model("new"), worker) == Resources(cores=1, memory_mb=50, disk_mb=2)


def test_learning_matches_real_summaries():
    d = SummaryDirectory(DATA / "monitor")
    summaries = d.poll()
    L = CategoryLearner()
    L.add_all(summaries)
    models = L.models()
    assert set(models) == {"align", "reduce"}
    align = [x for x in summaries if x.category == "align"]
    assert models["align"].samples == len(align) == 3
    assert models["align"].peak.memory_mb == max(x.memory_mb for x in align)
    assert abs(models["align"].runtime_mean_s - sum(x.wall_time_s for x in align) / 3) < 1e-9
