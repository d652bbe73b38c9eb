"""One configuration: defaults < config file < HTA_* variables < flags, one
pydantic model, one-line errors naming the key; and ``makeflow -T hta``, which reaches HTA's
options through them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import HTA, run_hta

from hta.errors import UsageError
from hta.makeflow_shim import hta_argv, wants_hta
from hta.submit import config
from workqueue_bridge.makeflow_args import MakeflowArgs, real_makeflow


def effective(*args: str, env: dict | None = None, cwd: Path | None = None) -> dict:
    r = run_hta("config", *args, env=env, cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stderr
    return yaml.safe_load(r.stdout)


def test_layers_flags_win_over_environment_over_file(tmp_path: Path):
    (tmp_path / "c.yaml").write_text("max-workers: 8\npolicy: hpa-50\nnamespace: batch\nidle_timeout: 60\n")
    got = effective("--config", str(tmp_path / "c.yaml"), "--max-workers", "3", env={"HTA_POLICY": "static"})
    assert (got["max-workers"], got["policy"], got["namespace"], got["idle-timeout"]) == (3, "static", "batch", 60)
    assert effective()["max-workers"] == 4  # the model's default when nobody sets it


def test_toml_and_the_printed_configuration_is_a_valid_config_file(tmp_path: Path):
    (tmp_path / "c.toml").write_text('policy = "factory"\nworker-cores = 2\nmakeflow-args = ["-j", "2"]\n')
    got = effective("--config", str(tmp_path / "c.toml"), "W", "--", "-R")
    assert (got["policy"], got["worker-cores"], got["makeflow-args"], got["workflow"]) == \
        ("factory", 2, ["-j", "2", "-R"], "W")
    (tmp_path / "again.yaml").write_text(yaml.safe_dump(got))
    assert effective("--config", str(tmp_path / "again.yaml")) == got


@pytest.mark.parametrize("text,suffix,needle", [
    ("max_workrs: 3\n", ".yaml", "unknown key 'max_workrs' in the config file"),
    ("max_workrs: 3\n", ".yaml", "did you mean 'max-workers'?"),
    ("colour: blue\n", ".yaml", "allowed keys are account, backend, "),
    ("max-workers: 8\n  policy: hta\n", ".yaml", "(mapping values are not allowed here at line 2, column 9)"),
    ("a: 1\n---\nb: 2\n", ".yaml", "(expected a single document in the stream, but found another document at "
                                  "line 2, column 1)"),
    ("a: \x01\n", ".yaml", "special characters are not allowed (character 4)"),
    ("\xff\xfe", ".yaml", "is not UTF-8 text (byte 0)"),
    ("\xff\xfe", ".toml", "is not UTF-8 text (byte 0)"),
    ("max-workers: -1\n", ".yaml", "max-workers (from config file"),
    ("max-workers = [\n", ".toml", "is not valid TOML"),
    ("- a\n- b\n", ".yaml", "must hold keys and values"),
])
def test_bad_config_is_one_line(tmp_path: Path, text, suffix, needle):
    f = tmp_path / f"c{suffix}"
    f.write_bytes(text.encode("latin-1"))  # (bytes as written: \xff is one byte, not UTF-8)
    r = run_hta("config", "--config", str(f), timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("hta: error: ") and needle in line, line


@pytest.mark.parametrize("source,values,line", [
    ("the command line", {"port": 70000}, "--port must be at most 65535, not 70000 (see: hta makeflow --help)"),
    ("the environment", {"max-workers": "-1"},
     "HTA_MAX_WORKERS (from the environment) must be at least 1, not -1 (see: hta makeflow --help)"),
    ("the environment", {"min-interval": "nan"},
     "HTA_MIN_INTERVAL (from the environment) must be a finite number, not 'nan' (see: hta makeflow --help)"),
    ("the environment", {"max-workers": "many"},
     "HTA_MAX_WORKERS (from the environment) must be a whole number, not 'many' (see: hta makeflow --help)"),
    # (pydantic reads true as 1)
    ("config file c.yaml", {"max-workers": True},
     "max-workers (from config file c.yaml) must be a number, not True (see: hta makeflow --help)"),
    ("config file c.yaml", {"policy": True},  # (`policy: yes`)
     "policy (from config file c.yaml) must be text (YAML reads yes, no, on, off as true or false: quote it), "
     "not True (see: hta makeflow --help)"),
])
def test_a_value_out_of_range_is_said_in_the_command_lines_words(source, values, line):
    with pytest.raises(UsageError) as e:
        config.build([(source, values)])
    assert str(e.value) == line


def test_text_that_reads_as_a_number_is_judged_as_the_text_it_is():
    with pytest.raises(UsageError) as e:  # (not "must be a finite number")
        config.build([("the environment", {"policy": "nan"})])
    assert str(e.value).startswith("HTA_POLICY (from the environment): unknown policy 'nan': choose one of")


def test_a_config_file_named_by_hta_config_is_named_so_and_a_fifo_is_not_read(tmp_path: Path):
    r = run_hta("config", env={"HTA_CONFIG": str(tmp_path / "nosuch.yaml")}, timeout=60)
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert line.endswith("give a readable YAML or TOML file to HTA_CONFIG"), line
    os.mkfifo(tmp_path / "fifo")
    r = run_hta("config", "--config", str(tmp_path / "fifo"), timeout=30)  # (it was read forever)
    assert r.returncode == 2
    assert r.stderr.strip() == f"hta: error: config file {tmp_path / 'fifo'} is not a regular file (a named pipe): " \
        "give a YAML or TOML file to --config"
    # a shell's pipe has its writer: read as a file is (`--config <(…)`)
    r = subprocess.run([*HTA, "config", "--config", "/dev/stdin"], input="max-workers: 7\n", capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0 and yaml.safe_load(r.stdout)["max-workers"] == 7, r.stderr


def test_a_namespace_kubernetes_would_refuse_is_one_line_in_words():
    with pytest.raises(UsageError) as e:
        config.build([("the command line", {"namespace": "Bad_NS"})])
    assert str(e.value) == ("--namespace: not a Kubernetes namespace name: lowercase letters, digits and '-', at most "
                            "63, beginning and ending with a letter or digit (got 'Bad_NS')")


def test_environment_errors_name_the_variable():
    with pytest.raises(UsageError, match=r"HTA_MAX_WORKERS \(from the environment\)"):
        config.build([("the environment", config.from_environment({"HTA_MAX_WORKERS": "many"}))])
    # a policy too (it was refused later, where no one knew it came from HTA_POLICY), quoted once
    with pytest.raises(UsageError) as e:
        config.build([("the environment", config.from_environment({"HTA_POLICY": "zzz"}))])
    assert str(e.value).startswith("HTA_POLICY (from the environment): unknown policy 'zzz': choose one of hta, ")
    assert "(got " not in str(e.value)


def test_a_misspelled_variable_is_named_and_other_hta_variables_are_not():
    # a typo used to leave the default in force in silence
    r = run_hta("config", env={"HTA_MAX_WORKES": "3", "HTA_POD_NAME": "w1", "HTA_K8S_CACHE": "/x",
                               "HTA_K8S_START_TIMEOUT_S": "15", "HTA_TESTCLUSTER_DIR": "/y"}, timeout=60)
    assert r.returncode == 0 and yaml.safe_load(r.stdout)["max-workers"] == 4
    assert r.stderr.strip().splitlines() == [
        "hta: warning: HTA_MAX_WORKES is not an HTA setting and is ignored: did you mean HTA_MAX_WORKERS?"]
    assert config.misspelled_variables({"HTA_NAMESPACES": "b", "HTA_K8S_START_TIMEOUT": "9"}) == [
        "HTA_K8S_START_TIMEOUT is not an HTA setting and is ignored: did you mean HTA_K8S_START_TIMEOUT_S?",
        "HTA_NAMESPACES is not an HTA setting and is ignored: did you mean HTA_NAMESPACE?"]


def test_shim_recognises_hta_and_keeps_makeflow_options():
    a = MakeflowArgs.parse(["-T", "hta", "-j", "2", "sub/W"])
    assert wants_hta(a) and hta_argv(a) == ["makeflow", "sub/W", "--", "-j", "2"]
    assert wants_hta(MakeflowArgs.parse(["--batch-type=hta"]))
    assert hta_argv(MakeflowArgs.parse(["-Thta"])) == ["makeflow", "./Makeflow", "--"]
    assert not wants_hta(MakeflowArgs.parse(["-T", "local", "W"]))


def test_shim_names_a_bad_option_itself_under_dash_T_hta(capsys):
    from hta.makeflow_shim import main

    assert main(["-T", "hta", "--bogus", "W"]) == 2
    assert capsys.readouterr().err.strip() == ("makeflow: error: unknown makeflow option --bogus: see makeflow --help "
                                               "(makeflow -T hta --help lists makeflow's options and HTA's)")


def test_the_real_makeflow_is_found_past_the_shim(tmp_path: Path, monkeypatch):
    shim = tmp_path / "makeflow"
    shim.write_text("#!/bin/sh\n# from hta.makeflow_shim import main\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    found = real_makeflow()
    assert found is not None and Path(found) != shim
    assert "hta.makeflow_shim" not in Path(found).read_text(errors="replace")[:2048]


@pytest.mark.slow
def test_makeflow_dash_T_hta_runs_hta_and_other_types_pass_through(tmp_path: Path):
    (tmp_path / "W").write_text("out.txt:\n\techo hi > out.txt\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HTA_POLICY": "static", "HTA_MAX_WORKERS": "1"}
    r = subprocess.run(["makeflow", "-T", "hta", "W"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "policy static" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "W.scaling.jsonl").is_file() and (tmp_path / "out.txt").read_text() == "hi\n"
    (tmp_path / "V").write_text("v.txt:\n\techo v > v.txt\n")
    r = subprocess.run(["makeflow", "-T", "local", "V"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and (tmp_path / "v.txt").is_file() and not (tmp_path / "V.scaling.jsonl").exists()


def test_bash_completion_completes_commands_and_options(tmp_path: Path):
    r = run_hta("completion", "bash", timeout=60)
    assert r.returncode == 0
    script = tmp_path / "hta.bash"
    script.write_text(r.stdout)
    probe = (f'source {script}; COMP_WORDS=(hta makeflow --max-w); COMP_CWORD=2; COMP_LINE="hta makeflow --max-w"; '
             f'COMP_POINT=${{#COMP_LINE}}; _shtab_hta; echo "${{COMPREPLY[@]}}"; '
             f'COMP_WORDS=(hta rep); COMP_CWORD=1; COMP_LINE="hta rep"; COMP_POINT=7; _shtab_hta; echo "${{COMPREPLY[@]}}"')
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.stdout.split("\n")[:2] == ["--max-workers", "report"], out.stdout + out.stderr


@pytest.mark.parametrize("argv,needle", [
    (["--policy", "nonsense"], "unknown policy 'nonsense'"),
    (["--backend", "aws"], "unknown backend 'aws': choose one of local, slurm, k8s"),
    (["--min-workers", "5", "--max-workers", "2"], "--min-workers (5) is above --max-workers (2)"),
    (["--min-interval", "10", "--max-interval", "5"], "--min-interval (10) is above --max-interval (5)"),
    (["W", "--", "-T", "local"], "makeflow option -T cannot be used under HTA"),
    (["-q"], "hta config has no option -q"),  # (it named hta makeflow)
])
def test_config_refuses_what_hta_makeflow_would(argv, needle):
    # it printed these as a valid configuration, exit 0
    r = run_hta("config", *argv, timeout=60)
    assert r.returncode == 2 and not r.stdout and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("hta: error: ") and needle in line, line


def test_a_folder_given_as_the_workflow_is_named_as_one(tmp_path: Path):
    (tmp_path / "Makeflow").write_text("a:\n\ttouch a\n")
    r = run_hta("makeflow", str(tmp_path), cwd=tmp_path, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"hta: error: workflow '{tmp_path}' is a folder: give the path to a Makeflow file "
                                f"(it holds one: {tmp_path}/Makeflow)"), r.stderr
    # hta simulate takes the folder for the Makeflow it holds
    r = run_hta("simulate", "--workflow", str(tmp_path), "--seeds", "1", "--policies", "hta", timeout=60)
    assert r.returncode == 0 and "hta: assumed: 1 of 1 rules run 60 s" in r.stderr, r.stderr


def test_a_device_given_as_the_workflow_is_named_as_no_regular_file():
    # it said "not found", though /dev/null is there
    for argv, fix in ((["makeflow", "/dev/null"], "give the path to a Makeflow file"),
                      (["simulate", "--workflow", "/dev/null"],
                       "give a Makeflow (or its folder) or a WfCommons JSON instance")):
        r = run_hta(*argv, cwd=Path("/tmp"), timeout=60)
        assert r.returncode == 2
        assert r.stderr.strip() == f"hta: error: workflow file '/dev/null' is not a regular file: {fix}", r.stderr


def test_an_argument_a_command_does_not_take_points_to_that_commands_help():
    r = run_hta("css", "--pid", "1", "2", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == "hta: error: unrecognized arguments: 2 (see: hta css --help)", r.stderr


def test_css_is_set_for_every_worker_of_a_run_and_reaches_their_command_line():
    from hta.node.worker import worker_command

    assert effective()["css"] == "on"
    assert effective("--no-css")["css"] == "off"
    assert effective("--css", "dry-run", env={"HTA_CSS": "off"})["css"] == "dry-run"  # a flag wins
    r = run_hta("config", env={"HTA_CSS": "sometimes"}, timeout=60)
    assert r.returncode == 2 and "HTA_CSS" in r.stderr and "'dry-run'" in r.stderr
    cmd = worker_command("h:1", disk_mb=10, idle_timeout_s=60, css="off", css_log=Path("x.jsonl"))
    assert "--no-css" in cmd and not any(a.startswith("--css") for a in cmd)
    cmd = worker_command("h:1", disk_mb=10, idle_timeout_s=60, css="dry-run", css_log=Path("x.jsonl"))
    assert "--css-dry-run" in cmd and "--css-log=x.jsonl" in cmd and "--no-css" not in cmd


def test_the_local_backend_starts_its_workers_with_the_runs_css(tmp_path: Path):
    from types import SimpleNamespace

    from hta.backends import BackendOptions
    from hta.backends.local import from_options

    pool = from_options(BackendOptions(css="dry-run"), SimpleNamespace(run_dir=tmp_path, epoch=0))
    assert pool.provider.css == "dry-run"
