"""A WfFormat file with a number or a list the simulator cannot use is refused by
``hta simulate --workflow`` in one line naming the file, the task, the field and what
it must be (exit 2, no traceback); it was a simpy error ("Negative delay -5.0"), a run
"finished" in NaN seconds, a run unfinished at the horizon, a negative core count taken,
or a string of parents read as a dependency cycle."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_cli_errors import one_error_line

SIMULATE = ("simulate", "--policies", "hta", "--seeds", "1", "--max-nodes", "3")


def v14(**fields) -> dict:
    """WfFormat 1.4: task ``a`` (with ``fields``) and its child ``b``."""
    a = {"id": "a", "name": "a", "runtime": 10, "parents": [], "children": ["b"], **fields}
    b = {"id": "b", "name": "b", "runtime": 5, "parents": ["a"], "children": []}
    return {"name": "w", "schemaVersion": "1.4", "workflow": {"jobs": [a, b]}}


def v15(spec: dict | None = None, execution: dict | None = None, files: object = ()) -> dict:
    """WfFormat 1.5: task ``a`` (``spec`` and ``execution`` fields) and its child ``b``."""
    tasks = [{"id": "a", "name": "a", "parents": [], "children": ["b"], **(spec or {})},
             {"id": "b", "name": "b", "parents": ["a"], "children": []}]
    runs = [{"id": "a", "runtimeInSeconds": 10, **(execution or {})}, {"id": "b", "runtimeInSeconds": 5}]
    return {"name": "w", "schemaVersion": "1.5", "workflow": {
        "specification": {"tasks": tasks, "files": list(files) if isinstance(files, tuple) else files},
        "execution": {"makespanInSeconds": 15, "executedAt": "2024-01-01T00:00:00", "tasks": runs}}}


def simulate(tmp_path: Path, capsys, data: dict, *extra: str):
    """``hta simulate --workflow F.json`` in this process (as ``hta`` runs it, without its start-up)."""
    from hta.cli import main

    wf = tmp_path / "F.json"
    wf.write_text(json.dumps(data))  # (Python's json writes NaN and Infinity, as a user's tool may)
    capsys.readouterr()
    code = main([*SIMULATE, "--workflow", str(wf), *extra])
    out = capsys.readouterr()
    return wf, SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


NAN, INF = math.nan, math.inf

REFUSED = [
    # runtime: a simpy "Negative delay -5.0"; NaN "finished"; Infinity unfinished at 172800 s
    (v14(runtime=-5), "task 'a': runtime must be a finite number of seconds ≥ 0, not -5"),
    (v15(execution={"runtimeInSeconds": -5}), "task 'a': runtimeInSeconds must be a finite number of seconds ≥ 0, not -5"),
    (v15(execution={"runtimeInSeconds": NAN}), "task 'a': runtimeInSeconds must be a finite number of seconds ≥ 0, not NaN"),
    (v14(runtime=NAN), "task 'a': runtime must be a finite number of seconds ≥ 0, not NaN"),
    (v15(execution={"runtimeInSeconds": INF}), "task 'a': runtimeInSeconds must be a finite number of seconds ≥ 0, "
                                               "not Infinity"),
    (v14(runtime=-INF), "task 'a': runtime must be a finite number of seconds ≥ 0, not -Infinity"),
    (v14(runtime="5"), "task 'a': runtime must be a finite number of seconds ≥ 0, not \"5\""),
    (v14(runtime=True), "task 'a': runtime must be a finite number of seconds ≥ 0, not true"),
    # cores: -2 was taken
    (v15(execution={"coreCount": -2}), "task 'a': coreCount must be a number of cores ≥ 1, not -2"),
    (v14(cores=-2), "task 'a': cores must be a number of cores ≥ 1, not -2"),
    (v14(cores=NAN), "task 'a': cores must be a number of cores ≥ 1, not NaN"),
    (v15(execution={"coreCount": 0.5}), "task 'a': coreCount must be a number of cores ≥ 1, not 0.5"),
    (v15(execution={"coreCount": "2"}), "task 'a': coreCount must be a number of cores ≥ 1, not \"2\""),
    (v14(cores=True), "task 'a': cores must be a number of cores ≥ 1, not true"),
    # memory: -1 was taken
    (v15(execution={"memoryInBytes": -1}), "task 'a': memoryInBytes must be a finite number of bytes ≥ 0, not -1"),
    (v15(execution={"memoryInBytes": INF}), "task 'a': memoryInBytes must be a finite number of bytes ≥ 0, "
                                            "not Infinity"),
    (v14(memory=-1), "task 'a': memory must be a finite number of KB ≥ 0, not -1"),
    (v14(memory=NAN), "task 'a': memory must be a finite number of KB ≥ 0, not NaN"),
    # avgCPU
    (v15(execution={"avgCPU": -50}), "task 'a': avgCPU must be a finite percentage ≥ 0"),
    (v14(avgCPU=NAN), "task 'a': avgCPU must be a finite percentage ≥ 0"),
    (v14(avgCPU="high"), "task 'a': avgCPU must be a finite percentage ≥ 0"),
    # file sizes
    (v15({"inputFiles": ["f"]}, files=[{"id": "f", "sizeInBytes": -1}]),
     "specification.files: file 'f': sizeInBytes must be a finite number of bytes ≥ 0, not -1"),
    (v15({"outputFiles": ["f"]}, files=[{"id": "f", "sizeInBytes": NAN}]),
     "specification.files: file 'f': sizeInBytes must be a finite number of bytes ≥ 0, not NaN"),
    (v15(files=[{"id": "f", "sizeInBytes": True}]),
     "specification.files: file 'f': sizeInBytes must be a finite number of bytes ≥ 0, not true"),
    (v14(files=[{"name": "f", "link": "input", "size": -3}]),
     "task 'a': file 'f': size must be a finite number of bytes ≥ 0, not -3"),
    (v14(files=[{"name": "g", "link": "output", "size": INF}]),
     "task 'a': file 'g': size must be a finite number of bytes ≥ 0, not Infinity"),
    (v14(files=[{"name": "f", "link": "input", "size": "1kB"}]),
     "task 'a': file 'f': size must be a finite number of bytes ≥ 0, not \"1kB\""),
    # lists: a string of parents was read as its letters (a cycle b → a → b)
    (v14(parents="b"), "task 'a': parents must be a list of the ids of the tasks it waits for, e.g. [\"b\"], not \"b\""),
    (v15({"parents": "b"}), "task 'a': parents must be a list of the ids of the tasks it waits for"),
    (v14(parents=[["b"]]), "task 'a': parents must be a list of the ids of the tasks it waits for"),
    (v14(children="b"), "task 'a': children must be a list of the ids of the tasks that wait for it, "
                        "e.g. [\"b\"], not \"b\""),
    (v15({"children": {"b": 1}}), "task 'a': children must be a list of the ids of the tasks that wait for it"),
    (v14(files="f.txt"), "task 'a': files must be a list of files, e.g. [{\"name\": \"f\""),
    (v14(files=["f.txt"]), "task 'a': files[0] must be a file object"),
    (v15({"inputFiles": "f"}, files=[{"id": "f", "sizeInBytes": 1}]), "task 'a': inputFiles must be a list of file "
                                                                       "ids, e.g. [\"f\"], not \"f\""),
    (v15({"outputFiles": 3}), "task 'a': outputFiles must be a list of file ids"),
    (v15(files={"f": 1}), "specification.files must be a list of files, e.g. [{\"id\": \"f\""),
    (v15(files=["f"]), "specification.files[0] must be a file object"),
]


@pytest.mark.parametrize("data, said", REFUSED, ids=[f"{i}-{s.split(' must')[0]}" for i, (_, s) in enumerate(REFUSED)])
def test_a_number_or_list_the_simulator_cannot_use_is_one_line_naming_task_field_and_fix(tmp_path: Path, capsys, data, said):
    wf, r = simulate(tmp_path, capsys, data)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    one_error_line(r, f"hta: error: {wf}: {said}")
    assert r.stderr.count(str(wf)) == 1 and r.stdout == ""  # (the file named once)


def test_a_negative_runtime_is_refused_before_the_simulator_sees_it(tmp_path: Path, capsys):
    # it was "hta: error: Negative delay -5.0", simpy's words: no file, no task, no fix
    wf, r = simulate(tmp_path, capsys, v15(execution={"runtimeInSeconds": -5}), "--format", "json")
    assert r.returncode == 2 and "Negative delay" not in r.stderr
    one_error_line(r, str(wf), "task 'a'", "runtimeInSeconds", "≥ 0", "not -5")


@pytest.mark.parametrize("bad", [NAN, INF])
def test_a_runtime_of_nan_or_infinity_is_no_finished_or_unfinished_run(tmp_path: Path, capsys, bad):
    # NaN "finished" (exit 0, `"runtime_s": NaN`, no JSON); Infinity ran to the 172800 s horizon
    wf, r = simulate(tmp_path, capsys, v14(runtime=bad), "--format", "json")
    assert r.returncode == 2 and r.stdout == "" and "NaN" not in r.stdout
    one_error_line(r, str(wf), "task 'a'", "runtime must be a finite number of seconds")


def test_a_string_of_parents_is_not_called_a_cycle(tmp_path: Path, capsys):
    data = {"workflow": {"tasks": [{"id": "a", "runtime": 1, "parents": "b"},
                                   {"id": "b", "runtime": 1, "parents": ["a"]}]}}
    _, r = simulate(tmp_path, capsys, data)
    assert r.returncode == 2 and "cycle" not in r.stderr
    one_error_line(r, "task 'a': parents must be a list")


def _no_nan(text: str) -> float:
    raise AssertionError(f"{text} in the JSON output")


@pytest.mark.parametrize("data", [
    # zeros where zero means something (no time, no bytes) or "not recorded" (cores, memory,
    # avgCPU: the defaults), null file sizes and children, whole-number floats, numeric ids
    v14(runtime=0, cores=0, memory=0, avgCPU=0, files=[{"name": "f", "link": "input", "size": 0},
                                                      {"name": "g", "link": "output", "size": None}]),
    v14(runtime=12.5, cores=2.0, memory=2048, avgCPU=150, children=None),
    v15(execution={"coreCount": 1.5}),  # (WfFormat 1.5's schema: a number ≥ 1; it takes 2 cores)
    v15({"inputFiles": ["f"], "outputFiles": ["g"]}, {"runtimeInSeconds": 0.0, "coreCount": None,
                                                      "memoryInBytes": 0, "avgCPU": None},
        files=[{"id": "f", "sizeInBytes": 0}, {"id": "g", "sizeInBytes": 1048576}, {"id": "h"}]),
    {"workflow": {"tasks": [{"id": 1, "runtime": 3}, {"id": 2, "runtime": 4, "parents": [1]}]}},
], ids=["1.4-zeros", "1.4-floats", "1.5-fractional-cores", "1.5", "numeric-ids"])
def test_a_valid_file_still_runs(tmp_path: Path, capsys, data):
    _, r = simulate(tmp_path, capsys, data, "--format", "json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = json.loads(r.stdout, parse_constant=_no_nan)
    (run,) = out["runs"]
    assert run["finished"] and 0 < run["runtime_s"] < 3600
