"""README.md tells the truth.

- The ```console blocks are run in order, command by command (``$ `` lines), in one bash
  session (as a reader follows along) from the repository's root with a fresh HOME: each command must exit 0, and each output
  line shown under it must appear in what it printed — verbatim (spaces collapsed) when it
  holds no digit, else up to its first digit (times and ports vary).
- Every ``hta`` command shown anywhere in README.md names a real subcommand, and every
  ``--option`` it uses (before ``--``) is one that subcommand's ``--help`` lists.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_hta

README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
FAKE_HOME = "/home/you"


def console_steps() -> list[tuple[str, list[str]]]:
    """Every console block's commands, in order, as [(command, [expected output lines])]."""
    return [step for block in console_blocks() for step in block]


def console_blocks() -> list[list[tuple[str, list[str]]]]:
    """Each console block as [(command, [expected output lines])]."""
    out = []
    for lang, body in BLOCK.findall(README):
        if lang != "console":
            continue
        steps: list[tuple[str, list[str]]] = []
        for line in body.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps and line.strip():
                steps[-1][1].append(line)
        out.append(steps)
    return out


def norm(line: str) -> str:
    return " ".join(line.split())


def expected_in(expected: str, printed: str, home: str) -> bool:
    want = norm(expected.replace(FAKE_HOME, home))
    lines = [norm(x) for x in printed.splitlines()]
    m = re.search(r"\d", want)
    if m is None:
        return want in lines
    prefix = want[:m.start()]
    return len(prefix) >= 4 and any(x.startswith(prefix) for x in lines)


def test_readme_has_console_blocks():
    blocks = console_blocks()
    assert len(blocks) >= 2 and all(blocks), "the tour and the configuration are runnable"


@pytest.mark.slow
def test_console_blocks_run_as_shown(tmp_path: Path):
    steps = console_steps()
    home = tmp_path / "home"
    home.mkdir()
    script = [f"cd {ROOT}"]
    for i, (cmd, _) in enumerate(steps):
        script += [f"{{ {cmd}\n}} 2>&1", f"echo \"@@STEP {i} RC $?\""]
    env = {**os.environ, "HOME": str(home)}
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, env=env, timeout=600)
    outputs = re.split(r"^@@STEP \d+ RC (\d+)$", r.stdout, flags=re.M)
    printed, codes = outputs[0::2], outputs[1::2]
    assert len(codes) == len(steps), r.stdout + r.stderr
    for (cmd, expected), out, rc in zip(steps, printed, codes):
        assert rc == "0", f"`{cmd}` exited {rc}:\n{out}"
        for line in expected:
            assert expected_in(line, out, str(home)), f"`{cmd}` did not print {line!r}; it printed:\n{out}"


def shown_hta_commands() -> list[list[str]]:
    """``hta SUB --opt …`` from every code block (continuation lines joined)."""
    cmds = []
    for _, body in BLOCK.findall(README):
        text = re.sub(r"\\\n\s*", " ", body)
        for line in text.splitlines():
            line = line.strip().removeprefix("$ ")
            m = re.search(r"(?:^|\s|/)hta\s+([a-z]+)(.*)", line)
            if m and not line.startswith("#"):
                rest = m.group(2).split(" -- ")[0].split("#")[0]
                cmds.append([m.group(1), *re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest)])
    return cmds


def test_every_hta_command_shown_exists_with_its_options():
    cmds = shown_hta_commands()
    assert len(cmds) >= 10
    helps: dict[str, str] = {}
    for sub, *options in cmds:
        if sub not in helps:
            r = run_hta(sub, "--help", timeout=60)
            assert r.returncode == 0, f"README shows `hta {sub}`, which is no hta command"
            helps[sub] = r.stdout
        for opt in options:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", helps[sub]), \
                f"README shows `hta {sub} {opt}`, which `hta {sub} --help` does not list"
