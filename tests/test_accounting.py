"""The one definition of waste and shortage."""

from hta.accounting import CoreSample, integrate, node_seconds


def test_step_integration_by_hand():
    samples = [CoreSample(0, 0, 0, 4), CoreSample(10, 4, 2, 6), CoreSample(20, 4, 4, 4)]
    tot = integrate(samples, end=30)
    # waste: 0·10 + (4−2)·10 + 0·10 = 20; shortage: 4·10 + (6−2)·10 + 0·10 = 80
    assert tot.waste_core_s == 20 and tot.shortage_core_s == 80
    assert tot.supply_core_s == 80 and tot.in_use_core_s == 60 and tot.utilization == 0.75


def test_node_seconds_count_from_request():
    assert node_seconds([(0, 10), (5, None)], end=20) == 10 + 15


def test_waste_splits_into_idle_workers_and_beside_running_tasks():
    # 3 workers of 2 cores: one idle, one with 1 of 2 cores in use, one full, for 10 s
    tot = integrate([CoreSample(0, 6, 3, 3, idle=2)], end=10)
    assert tot.waste_core_s == 30 and tot.idle_waste_core_s == 20 and tot.busy_waste_core_s == 10
