"""A user's own policy: ``module:callable[:settings]`` and the ``hta.policies`` entry-point group,
each failure in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest

from hta.policies import make_policy, registry

MODULE = textwrap.dedent('''
    from dataclasses import dataclass
    from hta.model import ScaleDecision

    @dataclass
    class Fixed:
        name: str = "fixed"
        workers: int = 2

        def decide(self, obs):
            have = len(obs.workers) + len(obs.pending)
            return ScaleDecision(add=max(0, self.workers - have), next_decision_s=30.0,
                                 reason=f"fixed {self.workers}")

    def make_policy():
        return Fixed()

    class Plain:  # a policy, but not a dataclass: it has no settings
        name = "plain"

        def __init__(self, n=2):
            self.n = n

        def decide(self, obs):
            return ScaleDecision(next_decision_s=30.0)

    def not_a_policy():
        return 42

    def broken():
        raise RuntimeError("boom")

    NOT_CALLABLE = 3
''')


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mymod.py").write_text(MODULE)
    (pkg / "badimport.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_module_callable_loads_a_policy_and_takes_settings(plugin_dir):
    p = make_policy("mypkg.mymod:make_policy")
    assert type(p.inner).__name__ == "Fixed" and p.name == "fixed" and p.workers == 2
    p = make_policy("mypkg.mymod:make_policy:workers=5")
    assert p.workers == 5 and p.name == "mypkg.mymod:make_policy:workers=5"
    p = make_policy("mypkg.mymod:Fixed@10")  # a class is a callable; time scaling applies too
    assert p.name == "fixed@10"
    # built-in settings are still settings, not modules
    assert make_policy("factory:idle_timeout_s=60").idle_timeout_s == 60


@pytest.mark.parametrize("spec, says", [
    ("nosuch_mod_xyz:make_policy", "no module named 'nosuch_mod_xyz'"),
    ("mypkg.badimport:make_policy", "it imports 'no_such_dependency_xyz', which is missing"),
    ("mypkg.mymod:nothing_here", "module 'mypkg.mymod' has no 'nothing_here'"),
    ("mypkg.mymod:NOT_CALLABLE", "is a int, not a callable"),
    ("mypkg.mymod:not_a_policy", "returned int, not a Policy"),
    ("mypkg.mymod:broken", "raised RuntimeError: boom"),
    ("mypkg.mymod:make_policy:nope=1", "'nope' is not a setting of fixed"),
    # (it said "'n' is not a setting of plain; it has: " and listed nothing)
    ("mypkg.mymod:Plain:n=5", "plain has no settings: settings after the colon set the fields of a dataclass policy"),
])
def test_errors_are_one_line(plugin_dir, spec, says):
    with pytest.raises(ValueError) as err:
        make_policy(spec)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_empty_settings_are_no_settings(plugin_dir):
    # (a policy that is not a dataclass, with nothing after its second colon, raised TypeError:
    # a traceback from dataclasses.fields)
    p = make_policy("mypkg.mymod:Plain:")
    assert type(p.inner).__name__ == "Plain" and p.name == "plain"
    assert make_policy("mypkg.mymod:Plain:,").name == "plain"
    assert make_policy("mypkg.mymod:make_policy:").workers == 2
    assert make_policy("factory:").name == "factory"
    env = {**os.environ, "PYTHONPATH": f"{plugin_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    hta = [sys.executable, "-m", "hta.cli", "config", "--policy"]
    out = subprocess.run([*hta, "mypkg.mymod:Plain:"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and "policy: 'mypkg.mymod:Plain:'" in out.stdout, out.stderr
    out = subprocess.run([*hta, "mypkg.mymod:Plain:n=5"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "hta: error: --policy: policy 'mypkg.mymod:Plain:n=5': plain has no settings: settings after the colon set the "
        "fields of a dataclass policy (its number, string and bool fields)"], out.stderr


def test_entry_point_group(plugin_dir, monkeypatch):
    eps = {"fixed": EntryPoint(name="fixed", value="mypkg.mymod:make_policy", group="hta.policies"),
           "bad": EntryPoint(name="bad", value="mypkg.mymod:not_a_policy", group="hta.policies")}
    monkeypatch.setattr(registry, "_entry_points", lambda: eps)
    assert make_policy("fixed").name == "fixed"
    assert make_policy("fixed:workers=7").workers == 7
    assert "fixed" in registry.policy_names()
    with pytest.raises(ValueError, match="returned int, not a Policy"):
        make_policy("bad")


def test_hta_simulate_runs_a_policy_from_pythonpath(plugin_dir):
    env = {**os.environ, "PYTHONPATH": f"{plugin_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-m", "hta.cli", "simulate", "--workload", "io-bound", "--seeds", "1",
                          "--policies", "mypkg.mymod:make_policy", "--format", "json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)["runs"]
    assert [r["policy"] for r in runs] == ["fixed"] and runs[0]["finished"]
    bad = subprocess.run([sys.executable, "-m", "hta.cli", "simulate", "--workload", "io-bound", "--seeds", "1",
                          "--policies", "mypkg.mymod:not_a_policy"], capture_output=True, text=True, env=env,
                         timeout=300)
    assert bad.returncode != 0
    assert "returned int, not a Policy" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
