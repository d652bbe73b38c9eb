"""The real-stack replay's goal lines (bench/replay.py), on hand-made figures: HTA beside the
real KEDA ScaledJob at ≤ 1.02× the faster setting's runtime and ≤ the cheaper's node·s."""

from __future__ import annotations

from types import SimpleNamespace

from bench import replay


def run(policy: str, runtime_s: float, node_s: float) -> replay.Run:
    r = replay.Run("blast-3stage", policy)
    r.real = SimpleNamespace(runtime_s=runtime_s, node_s=node_s, waste_core_s=1.0)  # type: ignore[assignment]
    return r


def test_hta_is_held_to_the_faster_keda_settings_runtime_and_the_cheaper_ones_node_seconds(capsys):
    keda = [run("keda-scaledjob-3", 4000.0, 70000.0), run("keda-scaledjob-1", 5000.0, 60000.0)]
    assert replay.goals([run("hta", 4080.0, 60000.0), *keda]) == []
    out = capsys.readouterr().out
    assert "the faster KEDA's (keda-scaledjob-3): 1.020" in out and "the cheaper KEDA's (keda-scaledjob-1): 1.000" in out
    assert replay.goals([run("hta", 4081.0, 60000.0), *keda]) == ["blast-3stage runtime vs keda-scaledjob-3"]
    assert replay.goals([run("hta", 3000.0, 60001.0), *keda]) == ["blast-3stage node·s vs keda-scaledjob-1"]
    assert replay.goals([run("hta", 3000.0, 1.0)]) == []  # (no KEDA run: no line)
