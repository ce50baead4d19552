"""The tests' CLI fork server (tests/support/cli_forkserver.py, issue 53) stands in for a fresh interpreter: the same
exit status, stdout and stderr as a real ``python -m pc_pipelines.cli`` / installed script for the same command, the
child's environment and directory applied, a timeout that kills, nothing left running, and a real interpreter where
the environment changes what is read at import."""

import subprocess

import cli_forkserver
import pytest
from pilot_cli import INSTALLED, MODULE, run_cli


def both(*args, exe=MODULE, **kw):
    """The command through the fork server, then through a real interpreter."""
    forked = run_cli(*args, exe=exe, **kw)
    real = run_cli(*args, exe=exe, **{**kw, "extra_env": {**kw.get("extra_env", {}), "PC_TEST_FORKSERVER": "0"}})
    return forked, real


@pytest.mark.parametrize("exe", [MODULE, INSTALLED], ids=["module", "installed"])
@pytest.mark.parametrize("args", [
    ("--help",),
    ("train", "--no-such-flag"),  # argparse's own error: exit 2, usage on stderr
    ("sql", "--store", "it's $(x) here/s.duckdb", "SELECT 1"),  # no store: our one line with the fix, exit 2
])
def test_a_forked_command_prints_and_exits_as_a_fresh_interpreter(exe, args, tmp_path):
    forked, real = both(*args, exe=exe, cwd=tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert forked.returncode == (0 if args == ("--help",) else 2)
    assert "Traceback" not in forked.stderr


def test_the_child_runs_in_its_directory_with_its_environment(tmp_path):
    # a relative store path lands in cwd; the environment variable is read by the child (a bad value: the fix)
    run_cli("simulate", "--store", "s.duckdb", "--run-name", "a", "--steps", "2", "--method", "grpo",
            exe=MODULE, cwd=tmp_path, check_rc=0)
    assert (tmp_path / "s.duckdb").is_file()
    forked, real = both("simulate", "--store", "s.duckdb", "--run-name", "b", "--steps", "2", "--method", "grpo",
                        cwd=tmp_path, extra_env={"PC_PIPELINES_STORE_LOCK_WAIT_S": "soon"})
    assert forked.returncode == real.returncode == 2
    assert "PC_PIPELINES_STORE_LOCK_WAIT_S" in forked.stderr and forked.stderr == real.stderr
    rows = run_cli("sql", "--store", str(tmp_path / "s.duckdb"), "SELECT run_id FROM runs", "--json", exe=MODULE,
                   check_rc=0).stdout
    assert '"a"' in rows and '"b"' not in rows  # the refused command wrote nothing


def test_a_timeout_kills_the_child_and_nothing_is_left(procs, tmp_path):
    before = procs.descendants()
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("simulate", "--store", str(tmp_path / "s.duckdb"), "--run-name", "long", "--steps", "100000",
                "--method", "grpo", exe=MODULE, timeout=3)
    procs.assert_none_left(before, "the timed-out command")
    assert cli_forkserver.server_pid() not in procs.descendants()  # the server is not counted; it stays up
    assert run_cli("--help", exe=MODULE).returncode == 0


def test_an_environment_read_at_import_gets_a_real_interpreter(monkeypatch):
    base = cli_forkserver.BASE_ENV  # the server's: this worker's at collection
    assert cli_forkserver.usable(base)
    assert cli_forkserver.usable({**base, "PC_PIPELINES_STORE_LOCK_WAIT_S": "5", "PYTHONUNBUFFERED": "1"})
    for key in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "PYTHONHASHSEED", "LD_PRELOAD"):
        assert not cli_forkserver.usable({**base, key: "default"}), key
    # what libraries set in the test process once a test used them (Ray, torch's compiler, Dagster's webserver) is
    # no reason: read after the fork, or applied by the child
    assert cli_forkserver.usable({**base, "RAY_CLIENT_MODE": "0", "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",
                                  "PYTHONBREAKPOINT": "ray.util.rpdb._driver_set_trace"}), base.get("PYTHONWARNINGS")
    assert cli_forkserver.usable({**base, "PYTHONWARNINGS": "ignore"}) == ("PYTHONWARNINGS" not in base)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # a test's own change of the process's environment counts too
    assert not cli_forkserver.usable(None)
    monkeypatch.setenv("PC_TEST_FORKSERVER", "0")
    assert not cli_forkserver.usable(base)


def test_a_command_with_warning_filters_in_its_environment_is_forked_and_prints_as_a_fresh_interpreter(tmp_path):
    """PYTHONWARNINGS (which Dagster's webserver CLI sets in the test process) no longer sends a command to a real
    interpreter: the child adds the filters at its start, and prints what a fresh interpreter prints."""
    store = tmp_path / "s.duckdb"
    run_cli("simulate", "--store", str(store), "--run-name", "a", "--steps", "2", "--method", "grpo", exe=MODULE,
            check_rc=0)
    env = {"PYTHONWARNINGS": "error::DeprecationWarning,ignore::ResourceWarning"}
    forked, real = both("sql", "--store", str(store), "SELECT count(*) AS n FROM steps", "--json", extra_env=env)
    assert cli_forkserver.usable({**cli_forkserver.BASE_ENV, **env}) == ("PYTHONWARNINGS" not in
                                                                          cli_forkserver.BASE_ENV)
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout) == (0, '[\n {\n  "n": 2\n }\n]\n')
