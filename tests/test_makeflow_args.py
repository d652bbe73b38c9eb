"""makeflow's command line read as makeflow 8.0 reads it: the workflow among
permuted options, the options HTA owns in every getopt spelling, where the log is under
``-X``, a workflow named in ``--argv``, the JX flags makeflow_viz needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workqueue_bridge.makeflow import MakeflowError, check_extra_args, keepalive_args, one_line_error
from workqueue_bridge.makeflow_args import ArgsError, MakeflowArgs


@pytest.mark.parametrize("argv", [["-Tlocal", "M"], ["-T", "local", "M"], ["--batch-type=local", "M"],
                                  ["--batch-type", "local", "M"], ["--batch-t=local", "M"], ["M", "-T", "wq"],
                                  ["-RTlocal", "M"], ["-p9123", "M"], ["--port-file=f", "M"], ["-Nname", "M"],
                                  ["--project=x", "M"], ["-C", "h:1", "M"]])
def test_every_spelling_of_an_owned_option_is_refused(argv):
    with pytest.raises(MakeflowError, match="cannot be used under HTA"):
        check_extra_args(MakeflowArgs.parse(argv))


def test_passed_options_keep_their_tokens_and_the_workflow_may_come_first():
    a = MakeflowArgs.parse(["M", "-j", "4", "--retry-count=2", "-R", "--jx-define", "N=3"])
    assert a.dagfile == "M"
    assert a.tokens() == ["-j", "4", "--retry-count=2", "-R", "--jx-define", "N=3"]
    check_extra_args(a)  # none of them is HTA's
    assert a.format_options() == ["--jx-define=N=3"]


def test_the_log_follows_change_directory_and_makeflow_log(tmp_path: Path):
    a = MakeflowArgs.parse(["-X", "run", "/abs/W"], cwd=tmp_path)
    assert a.workdir == tmp_path / "run" and a.log_path == Path("/abs/W.makeflowlog")
    b = MakeflowArgs.parse(["-X", "run", "sub/W"], cwd=tmp_path)
    assert b.workflow_path == tmp_path / "sub/W" and b.log_path == tmp_path / "run/sub/W.makeflowlog"
    c = MakeflowArgs.parse(["-l", "my.log", "W"], cwd=tmp_path)
    assert c.log_path == tmp_path / "my.log"


def test_a_workflow_named_in_an_argv_file(tmp_path: Path):
    (tmp_path / "argv.json").write_text(json.dumps({"MAKEFLOW": "wf.jx", "jx": True, "batch-type": "local"}))
    a = MakeflowArgs.parse(["--argv", "argv.json"], cwd=tmp_path)
    assert a.dagfile == "wf.jx" and a.dag_from_argv and a.format_options() == ["--jx"]
    with pytest.raises(MakeflowError, match="in the --argv file"):
        check_extra_args(a)
    with pytest.raises(ArgsError, match="named twice"):
        MakeflowArgs.parse(["--argv", "argv.json", "other"], cwd=tmp_path)


@pytest.mark.parametrize("argv,needle", [(["-Q", "M"], "unknown makeflow option -Q"),
                                         (["--nope", "M"], "unknown makeflow option --nope"),
                                         (["--batch=x", "M"], "ambiguous"), (["-j"], "needs a value"),
                                         (["--retry=3", "M"], "takes no value"), (["A", "B"], "one workflow")])
def test_bad_makeflow_lines_are_named(argv, needle):
    with pytest.raises(ArgsError, match=needle):
        MakeflowArgs.parse(argv)


def test_monitor_breakers_and_keepalive():
    assert MakeflowArgs.parse(["--shared-fs", "/x", "M"]).monitor_breaker() == "--shared-fs"
    assert MakeflowArgs.parse(["--storage-limit=1G", "M"]).monitor_breaker() == "--storage-limit"
    assert MakeflowArgs.parse(["M"]).monitor_breaker() is None
    assert keepalive_args(120, MakeflowArgs.parse(["M"])) == ["--wq-keepalive-interval=60", "--wq-keepalive-timeout=60"]
    assert keepalive_args(120, MakeflowArgs.parse(["-t5", "M"])) == []


def test_a_fatal_line_is_said_in_one_line():
    text = "parsing...\n2026/11/23 14:15:17.42 makeflow_viz[5712] fatal: Found end of file.\n line: 1 column: 74\n"
    assert one_line_error(text) == "Found end of file. line: 1 column: 74"
    assert one_line_error("all good\n") is None


def test_a_busy_master_port_is_waited_for_then_given_up():
    import asyncio
    import socket

    from workqueue_bridge.makeflow import port_free, wait_port_free

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not port_free(port)
        assert asyncio.run(wait_port_free(port, 0.3)) is False
    assert port_free(port) and asyncio.run(wait_port_free(port, 0.3)) is True


def test_a_port_that_cannot_be_used_is_refused_at_once_not_waited_for(monkeypatch):
    # without the right to a port under 1024 bind() says EACCES: that was "in use" for 15 s
    import errno
    import socket

    from workqueue_bridge.makeflow import port_free

    def denied(self, address):
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(socket.socket, "bind", denied)
    with pytest.raises(MakeflowError, match=r"cannot listen on port 80 \(Permission denied\): choose another"):
        port_free(80)
