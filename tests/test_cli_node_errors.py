"""Bad input and signals for the node-side commands and `hta status`: one line `hta: error: …`
naming the fix and exit 2 for bad input, 128 + N when stopped by signal N (130 for Ctrl-C, 143
for SIGTERM; hta worker exits 0 when a SIGTERM drains it), and nothing left behind."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import threading
from pathlib import Path

import psutil
import pytest
from conftest import HTA, run_hta, wait
from test_cli_errors import one_error_line


def closed_port() -> int:
    """A port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_named(pid: int, name: str) -> list[psutil.Process]:
    try:
        return [c for c in psutil.Process(pid).children(recursive=True) if c.name() == name]
    except psutil.NoSuchProcess:
        return []


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "300"])
    yield p
    p.kill()
    p.wait()


# -- hta worker ------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["missing/wd1", "a-file", "/proc/no-such-folder"])
def test_worker_workdir_that_is_not_a_folder_is_refused(tmp_path: Path, where: str):
    (tmp_path / "a-file").write_text("")
    workdir = tmp_path / where
    r = run_hta("worker", "--master", f"127.0.0.1:{closed_port()}", "--workdir", str(workdir), "--no-css", timeout=60)
    assert r.returncode == 2
    one_error_line(r, f"--workdir {str(workdir)!r}", "give")
    assert not (tmp_path / "missing").exists()  # refused, not created


@pytest.mark.parametrize("where", [["--master", "127.0.0.1:99999"], ["--master", ":9123"], ["--master", "host"],
                                   ["--project", "p", "--catalog", "catalog:0"]])
def test_worker_master_or_catalog_that_is_not_host_port_is_refused_at_once(where: list[str]):
    # (at 99999 work_queue_worker retried for --connect-timeout, 15 min; an empty host took 10 s to resolve)
    r = run_hta("worker", *where, "--no-css", timeout=30)
    assert r.returncode == 2
    one_error_line(r, f"{where[-2]} {where[-1]!r} must be HOST:PORT, with a port from 1 to 65535")


def test_worker_project_needs_a_catalog():
    r = run_hta("worker", "--project", "foo", "--no-css", timeout=60)
    assert r.returncode == 2
    one_error_line(r, "--project 'foo' needs --catalog HOST:PORT")


def test_worker_css_log_that_is_a_folder_is_refused(tmp_path: Path):
    r = run_hta("worker", "--master", f"127.0.0.1:{closed_port()}", "--css-log", str(tmp_path), timeout=60)
    assert r.returncode == 2
    one_error_line(r, "--css-log", "is a folder", "give a file path")


def start_worker(tmp_path: Path, *where: str) -> tuple[subprocess.Popen, Path]:
    workdir = tmp_path / "wd"
    workdir.mkdir()
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        p = subprocess.Popen([*HTA, "worker", *where, "--no-css", f"--workdir={workdir}"], stderr=f)
    # its signal handlers are in place before it starts work_queue_worker
    assert wait(lambda: children_named(p.pid, "work_queue_worker") or p.poll() is not None, 60, every=0.1)
    assert p.poll() is None, err.read_text()
    return p, workdir


# SIGTERM is a drain (a backend deleting its pod): a normal end, 0, as work_queue_worker's own
@pytest.mark.slow  # a real work_queue_worker or CSS daemon, stopped by a signal
@pytest.mark.parametrize("signum, rc", [(signal.SIGINT, 130), (signal.SIGHUP, 129), (signal.SIGTERM, 0)])
def test_worker_that_cannot_reach_its_master_exits_0_on_sigterm_128_plus_n_otherwise(tmp_path: Path, signum: int, rc: int):
    p, workdir = start_worker(tmp_path, "--master", f"127.0.0.1:{closed_port()}")
    try:
        p.send_signal(signum)
        assert p.wait(30) == rc, (tmp_path / "stderr").read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert not list(workdir.iterdir())


@pytest.mark.slow  # a real work_queue_worker or CSS daemon, stopped by a signal
def test_worker_looking_through_a_catalog_stops_on_ctrl_c_and_leaves_nothing(tmp_path: Path):
    # work_queue_worker ignores SIGTERM while it asks a catalog for its master: hta worker kills
    # it after its grace, says nothing about it (it had no task), and removes its workspace
    p, workdir = start_worker(tmp_path, "--project", "foo", "--catalog", f"127.0.0.1:{closed_port()}")
    try:
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = (tmp_path / "stderr").read_text()
    assert "Traceback" not in err and "warning" not in err, err
    assert not list(workdir.iterdir())


# -- hta css ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needles", [
    (["--cores", "abc"], ["--cores 'abc'", "give CPUs as a list like 0-3,8"]),
    (["--cores", "3-1"], ["goes down", "1-3"]),
    (["--cores", "100000-100001"], ["this machine has no CPU 100000-100001", "give CPUs among"]),
    (["--lambda", "-5"], ["--lambda must be at least 0, not -5"]),
    (["--lambda", "nan"], ["--lambda must be a finite number"]),
])
def test_css_refuses_a_bad_option(sleeper, args, needles):
    r = run_hta("css", "--pid", str(sleeper.pid), "--dry-run", "--duration", "0.2", *args, timeout=60)
    assert r.returncode == 2
    one_error_line(r, *needles)


def test_css_ends_at_its_duration_not_at_the_end_of_an_interval(sleeper):
    # --duration 0.5 with --interval 600 ran the whole 600 s interval (the timeout fails it)
    r = run_hta("css", "--pid", str(sleeper.pid), "--dry-run", "--duration", "0.5", "--interval", "600", timeout=30)
    assert r.returncode == 0, r.stderr


def test_css_refuses_a_folder_that_is_not_a_cgroup(tmp_path: Path):
    r = run_hta("css", "--cgroup", str(tmp_path), "--dry-run", "--duration", "0.2", timeout=60)
    assert r.returncode == 2
    one_error_line(r, "is not a cgroup", "give a cgroup folder")


@pytest.mark.parametrize("log, needles", [
    ("", ["is a folder", "give a file path"]),
    ("no-such-folder/css.jsonl", ["does not exist", "create it first"]),
])
def test_css_log_that_cannot_be_a_file_is_refused(tmp_path: Path, sleeper, log: str, needles):
    r = run_hta("css", "--pid", str(sleeper.pid), "--dry-run", "--duration", "0.2", "--log", str(tmp_path / log),
                timeout=60)
    assert r.returncode == 2
    one_error_line(r, "--log", *needles)
    assert not (tmp_path / "no-such-folder").exists()


@pytest.mark.slow  # a real work_queue_worker or CSS daemon, stopped by a signal
@pytest.mark.parametrize("signum, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_css_exits_128_plus_the_signal(tmp_path: Path, sleeper, signum: int, rc: int):
    err = tmp_path / "stderr"
    with open(err, "w") as f:
        p = subprocess.Popen([*HTA, "css", "--pid", str(sleeper.pid), "--dry-run", "--interval", "0.2",
                              "--backend", "proc"], stderr=f)
    try:
        assert wait(lambda: "css: backend" in err.read_text() or p.poll() is not None, 60, every=0.1)
        p.send_signal(signum)
        assert p.wait(30) == rc, err.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "Traceback" not in err.read_text()


# -- hta status ------------------------------------------------------------------------------------

class ServerThread:
    """A real status server (hta.status.server) on its own event loop; ``asked`` counts /status reads."""

    def __init__(self):
        from test_status import INFO, simulated_controller

        from hta.status.server import StatusServer
        from hta.status.snapshot import build_snapshot

        snapshot = build_snapshot(simulated_controller(10.0), INFO)
        self.asked = 0

        def source():
            self.asked += 1
            return snapshot
        self.server = StatusServer(source)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)

    def stop(self):
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


def test_status_watch_ends_normally_when_the_run_ends(tmp_path: Path):
    srv = ServerThread()
    err = tmp_path / "stderr"
    try:
        with open(err, "w") as f:
            p = subprocess.Popen([*HTA, "status", "--watch", "--interval", "0.2", srv.url], stderr=f,
                                 stdout=subprocess.DEVNULL)
        assert wait(lambda: srv.asked >= 2 or p.poll() is not None, 60, every=0.1), err.read_text()
        assert p.poll() is None, err.read_text()
        srv.stop()  # the run ends
        assert p.wait(30) == 0, err.read_text()
    finally:
        srv.stop()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert err.read_text().strip() == "hta: the run ended"
    # a watch that never reached the run is still an error
    r = run_hta("status", "--watch", srv.url, timeout=60)
    assert r.returncode == 1
    one_error_line(r, "cannot reach", "is the hta run still going?")


@pytest.mark.parametrize("url", ["127.0.0.1:99999", "http://localhost:0/", "localhost:http"])
def test_status_of_a_port_no_socket_has_is_refused(url: str):
    r = run_hta("status", url, timeout=60)
    assert r.returncode == 2
    one_error_line(r, f"{url!r}: the port must be a number from 1 to 65535", "give http://HOST:PORT/")


@pytest.mark.parametrize("url", ["ftp://x/", "file:///tmp/status"])
def test_status_of_a_url_that_is_not_http_is_refused(url: str):
    r = run_hta("status", url, timeout=60)
    assert r.returncode == 2
    one_error_line(r, "is not an http:// URL", "give http://HOST:PORT/")
    assert "ClientError" not in r.stderr
