"""The commit-msg hook scripts/setup.sh installs keeps subjects short and bodies apart."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ROOT

HOOK = ROOT / "scripts" / "commit-msg"


def check(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    msg = tmp_path / "COMMIT_EDITMSG"
    msg.write_text(text)
    return subprocess.run([str(HOOK), str(msg)], capture_output=True, text=True)


def test_a_short_subject_with_a_body_after_a_blank_line_passes(tmp_path: Path):
    assert check(tmp_path, "Split the estimator into a package\n\nWhy, at length.\n# a comment\n").returncode == 0
    assert check(tmp_path, "x" * 72 + "\n").returncode == 0


def test_a_long_subject_is_refused_with_its_length(tmp_path: Path):
    r = check(tmp_path, "x" * 73 + "\n")
    assert r.returncode == 1 and "73 characters" in r.stderr


def test_a_body_glued_to_the_subject_or_an_empty_subject_is_refused(tmp_path: Path):
    assert "blank line" in check(tmp_path, "Subject\nbody right after\n").stderr
    assert "empty" in check(tmp_path, "# only a comment\n").stderr
