"""`hta report --plot`'s figure as it goes into a paper: a title of words (the workflow and the
policy, or ``--title``), a legend in plain words, text an SVG editor can change, ``--dpi`` and
``--size``, no empty band, and the summary's rounding. In-process (``hta.cli.main``), small
hand-made logs: fast."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from hta.cli import main


def _obs(t: float, s: float, u: float, d: float, workers: int) -> dict:
    return {"kind": "observation", "t": t, "supply_cores": s, "in_use_cores": u, "demand_cores": d,
            "waiting": max(0, int(d - u)), "running": int(u), "workers": workers, "pending": 0, "tasks_done": 0}


def small_log(tmp_path: Path, name: str = "a.jsonl", runtime: float = 5.6, workflow: str = "/data/blast/Makeflow",
              policy: str = "hta", max_workers: int = 2) -> Path:
    """A short run with waste, shortage under the cap and beyond it (demand 8 cores, cap 2 workers
    of 2), both scale actions, and a runtime the summary shows with one decimal."""
    recs = [
        {"kind": "run", "t": 0, "started_at": 1.7e9, "workflow": workflow, "policy": policy, "backend": "local",
         "worker_shape": {"cores": 2, "memory_mb": 1000, "disk_mb": 1000}, "max_workers": max_workers},
        {"kind": "decision", "t": 0, "add": 2, "next_decision_s": 1, "reason": "x"},
        _obs(0, 0, 0, 8, 0),
        _obs(1.5, 2, 2, 8, 1),
        _obs(2.5, 4, 4, 8, 2),
        _obs(4.0, 4, 1, 1, 2),
        {"kind": "decision", "t": 4.0, "drain": ["w2"], "next_decision_s": 1, "reason": "y"},
        _obs(4.5, 2, 1, 1, 1),
        {"kind": "end", "t": runtime, "exit_code": 0, "runtime_s": runtime, "tasks_done": 3, "tasks_failed": 0,
         "tasks_retried": 0},
    ]
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def hta(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``hta ARGS`` in this process: its exit code (argparse's exit too), stdout and stderr."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def svg_texts(path: Path) -> list[str]:
    """The words of every ``<text>`` element of an SVG, unescaped."""
    return [html.unescape(t) for t in re.findall(r"<text\b[^>]*>(.*?)</text>", path.read_text(), flags=re.S)]


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height in pixels, from its IHDR header."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_the_svg_keeps_its_words_as_text_and_shows_the_title(tmp_path: Path, capsys):
    import matplotlib

    log = small_log(tmp_path)
    code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), "--plot-format", "svg",
                       "--title", "BLAST & friends: 2 workers")
    assert code == 0, err
    svg = (tmp_path / "fig" / "run1-hta.svg").read_text()
    assert "<text" in svg
    assert "BLAST & friends: 2 workers" in svg_texts(tmp_path / "fig" / "run1-hta.svg")
    # (set for the figure only: nothing global changed for whoever else draws in this process)
    assert matplotlib.rcParams["svg.fonttype"] == "path"


def test_the_title_is_the_workflow_and_the_policy(tmp_path: Path, capsys):
    log = small_log(tmp_path)
    code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), "--plot-format", "svg")
    assert code == 0, err
    texts = svg_texts(tmp_path / "fig" / "run1-hta.svg")
    assert "blast — hta" in texts


def test_the_legend_is_in_plain_words(tmp_path: Path, capsys):
    log = small_log(tmp_path)
    code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), "--plot-format", "svg")
    assert code == 0, err
    texts = svg_texts(tmp_path / "fig" / "run1-hta.svg")
    for label in ("worker cores", "cores in use", "cores tasks want", "idle workers", "waiting for workers",
                  "waiting beyond the worker limit", "worker limit (2 workers)", "workers added", "workers removed",
                  "time since the start (s)", "cores"):
        assert label in texts, (label, texts)
    words = " ".join(texts)
    for jargon in ("--", "cap", "policy's", "supply", "demand", "shortage", "waste", "submission", "scale up"):
        assert jargon not in words, jargon


def test_the_title_rounds_the_runtime_as_the_summary_does(tmp_path: Path, capsys):
    from hta.report import load_runs
    from hta.summary_view import summary_rows

    log = small_log(tmp_path, runtime=5.6)
    (run,), _ = load_runs([log])
    runtime = dict(summary_rows(run.summary))["runtime"]
    assert runtime == "5.6 s"
    code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), "--plot-format", "svg")
    assert code == 0, err
    words = " ".join(svg_texts(tmp_path / "fig" / "run1-hta.svg"))
    assert f"runtime {runtime}" in words and "runtime 6 s" not in words


def test_dpi_sets_the_png_resolution(tmp_path: Path, capsys):
    log = small_log(tmp_path)
    for dpi in ("50", "200"):
        code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / dpi), "--dpi", dpi)
        assert code == 0, err
    low, high = png_size(tmp_path / "50" / "run1-hta.png"), png_size(tmp_path / "200" / "run1-hta.png")
    assert low[0] < high[0] and low[1] < high[1]
    assert high[0] == pytest.approx(4 * low[0], abs=2)


def test_size_sets_the_figure_in_inches(tmp_path: Path, capsys):
    log = small_log(tmp_path)
    code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), "--size", "6,3", "--dpi", "100")
    assert code == 0, err
    assert png_size(tmp_path / "fig" / "run1-hta.png") == (600, 300)


def test_without_dpi_or_size_the_figure_keeps_its_size(tmp_path: Path, capsys):
    log = small_log(tmp_path)
    code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"))
    assert code == 0, err
    assert png_size(tmp_path / "fig" / "run1-hta.png") == (1350, 630)  # 9 × 4.2 in at 150 dpi


@pytest.mark.parametrize("option, value", [
    ("--size", "6x3"), ("--size", "6"), ("--size", "6,3,1"), ("--size", "0,3"), ("--size", "6,-3"),
    ("--size", "wide,3"), ("--size", "nan,3"), ("--dpi", "0"), ("--dpi", "high"), ("--dpi", "72.5"),
])
def test_a_bad_size_or_dpi_is_one_line_naming_the_option(tmp_path: Path, capsys, option: str, value: str):
    log = small_log(tmp_path)
    code, out, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), option, value)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("hta: error: ") and option in line and value in line, line
    assert "unrecognized" not in line and ("e.g. --size 6,3" in line if option == "--size" else "must be" in line)
    assert not (tmp_path / "fig").exists()


def test_a_figure_too_large_to_draw_is_refused(tmp_path: Path, capsys):
    log = small_log(tmp_path)
    code, out, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), "--dpi", "20000")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "--dpi" in line and "pixels" in line, line


@pytest.mark.parametrize("size", [[], ["--size", "3.4,2.6"]], ids=["default", "one-column"])
def test_no_empty_band_under_the_legend_and_nothing_cut_at_the_sides(tmp_path: Path, capsys, size: list[str]):
    import matplotlib.image

    log = small_log(tmp_path)
    code, _, err = hta(capsys, "report", str(log), "--plot", str(tmp_path / "fig"), "--dpi", "60", *size)
    assert code == 0, err
    ink = (matplotlib.image.imread(tmp_path / "fig" / "run1-hta.png")[:, :, :3] < 0.95).any(axis=2)
    rows = [i for i, row in enumerate(ink) if row.any()]
    height = ink.shape[0]
    assert height - 1 - rows[-1] <= 0.04 * height, (rows[-1], height)  # the legend's last line at the bottom
    assert rows[0] <= 0.04 * height  # and the title at the top
    assert not ink[:, 0].any() and not ink[:, -1].any()  # (a legend or a title wider than the figure is cut)


def test_several_runs_each_panel_names_its_run_and_the_title_heads_the_comparison(tmp_path: Path, capsys):
    a = small_log(tmp_path, "a.jsonl", policy="hta")
    b = small_log(tmp_path, "b.jsonl", policy="factory", workflow="/data/io/Makeflow")
    code, _, err = hta(capsys, "report", str(a), str(b), "--plot", str(tmp_path / "fig"), "--plot-format", "svg",
                       "--title", "Two policies")
    assert code == 0, err
    both = svg_texts(tmp_path / "fig" / "comparison.svg")
    assert {"blast — hta", "io — factory", "Two policies"} <= set(both)
    # each run's own figure keeps its own name: one title is not put on another run's figure
    assert "io — factory" in svg_texts(tmp_path / "fig" / "run2-factory.svg")
