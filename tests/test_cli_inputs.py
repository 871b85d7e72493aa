"""Hostile inputs to the CLI fail in a moment with one line naming the file, field or option and
the fix, never a traceback, and before any work or write (issue 31, items 13, 17 and 18):

* a tampered ``dvc.lock`` (a list root, an entry that is a string, an unknown policy or run, an
  out/dep path outside the project, broken YAML) stops ``agentr1 track``, ``--dry-run`` included,
  before anything is hashed or written;
* an output path that cannot be written (under ``/proc``, ``/dev/null`` as a folder, a file
  where a folder goes, ``compare --out``, ``profile --write``, ``AGENTR1_ARTIFACT_ROOT``) stops the
  stage or command before it starts its work;
* ``serve-retriever --port`` out of 0..65535 is a usage error, a bad ``--host`` is named as such,
  and a params file that is a device, a FIFO or over 16 MiB is refused without reading it.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
import yaml

from agentr1 import cli
from agentr1.config import ConfigError, load_config
from agentr1.errors import StageError
from agentr1.stages import track
from agentr1.tracking import provenance

REPO_PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


@pytest.fixture()
def project(tmp_path: Path, monkeypatch) -> Path:
    """An empty project folder (cwd) holding the repository's params (the MLflow store and artifact
    root: the throwaway ones of tests/conftest.py)."""
    params = yaml.safe_load(REPO_PARAMS.read_text())
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def _main(argv: list[str], capsys) -> tuple[int, str, float]:
    start = time.perf_counter()
    rc = cli.main(argv)
    return rc, capsys.readouterr().err, time.perf_counter() - start


# ---------------------------------------------------------------- item 13: a tampered dvc.lock


def _good_entry(out: str, dep: str = "params.yaml") -> dict:
    return {"cmd": "agentr1 report", "deps": [{"path": dep, "md5": "0" * 32}], "outs": [{"path": out, "md5": "1" * 32}]}


def _write_lock(root: Path, stages) -> Path:
    lock = root / "dvc.lock"
    lock.write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}, sort_keys=False))
    return lock


def test_track_dry_run_checks_the_whole_lock_before_hashing_anything(project: Path, monkeypatch) -> None:
    """Every problem of the lock in one StageError, from --dry-run too; no path is hashed (an out
    ``/usr`` was hashed for 96 s) and the store is not opened."""
    (project / "outside").mkdir()
    os.symlink("/usr", project / "link")
    runs = sorted(load_config(project / "params.yaml").runs)
    lock = _write_lock(
        project,
        {
            f"train@{runs[0]}": {
                "cmd": f"agentr1 train --run {runs[0]}",
                "outs": [{"path": f"data/runs/{runs[0]}", "md5": "x"}],
            },
            "evaluate@nosuchpolicy": {"cmd": "agentr1 evaluate --policy nosuchpolicy"},
            "train@nosuchrun": {"cmd": "agentr1 train --run nosuchrun"},
            "evaluate_baseline@" + runs[0]: {"cmd": "agentr1 evaluate"},
            "report": _good_entry("/usr"),
            "index": {"cmd": "agentr1 index", "deps": [{"path": "../outside"}], "outs": [{"path": "link/lib"}]},
            "validate": "agentr1 validate",
            "prepare": {"cmd": "agentr1 prepare", "outs": {"path": "data/processed"}},
            "sft": {"cmd": "agentr1 sft", "deps": ["data/processed"], "outs": [{"md5": "2" * 32}]},
        },
    )
    cfg = load_config(project / "params.yaml")

    def no_hash(path):
        raise AssertionError(f"hashed {path}")

    monkeypatch.setattr(provenance, "dvc_hash", no_hash)
    monkeypatch.setattr(
        track.lockruns, "open_store", lambda *a, **k: (_ for _ in ()).throw(AssertionError("store opened"))
    )
    with pytest.raises(StageError) as err:
        track.track(cfg, lock, dry_run=True)
    text = str(err.value)
    assert "\n" not in text and "nothing logged" in text and "`dvc repro`" in text and "git checkout dvc.lock" in text
    for part in [
        f"evaluate_baseline@{runs[0]}: policy {runs[0]!r} is evaluated as 'evaluate@{runs[0]}'",
        "report: out '/usr' is absolute",
        "index: dep '../outside' resolves to",
        "index: out 'link/lib' resolves to /usr/lib",
        "validate: the entry is a str, not a mapping",
        "prepare: outs is a dict, not a list",
        "sft: deps[0] is not a mapping with a string `path`",
        "sft: outs[0] is not a mapping",
    ]:
        assert part in text, part
    assert f"train@{runs[0]}:" not in text  # the good entry is not listed
    assert "nosuchpolicy" not in text and "nosuchrun" not in text  # entries of earlier params: skipped, no problem


def test_track_skips_the_lock_entries_of_runs_the_params_no_longer_define(project: Path, monkeypatch) -> None:
    """DVC leaves the entries of foreach items that left dvc.yaml in the lock (a profile's shorter
    `runs`, issue 49: `agentr1 track` refused such a lock): they are skipped, saying why, and the
    entries of the params' runs are planned as before."""
    runs = sorted(load_config(project / "params.yaml").runs)
    lock = _write_lock(
        project,
        {
            f"train@{runs[0]}-0": {
                "cmd": f"agentr1 train --run {runs[0]}-0",
                "outs": [{"path": "data/runs/x", "md5": "1" * 32}],
            },
            "train@gone_run-1": {
                "cmd": "agentr1 train --run gone_run-1",
                "outs": [{"path": "data/runs/y", "md5": "1" * 32}],
            },
            "evaluate@gone_run-1": {
                "cmd": "agentr1 evaluate --policy gone_run-1",
                "deps": [{"path": "data/runs/y", "md5": "1" * 32}],
            },
        },
    )
    monkeypatch.setattr(track.lockruns, "open_store", lambda *a, **k: (None, None))
    entries = {e.key: e for e in track.track(load_config(project / "params.yaml"), lock, dry_run=True)}
    for key in ("train@gone_run-1", "evaluate@gone_run-1"):
        assert entries[key].state == "skipped" and "'gone_run-1' is no run of these params" in entries[key].note
        assert "DVC keeps its lock entry" in entries[key].note
    assert entries[f"train@{runs[0]}-0"].state == "skipped" and "missing" in entries[f"train@{runs[0]}-0"].note


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("- schema: '2.0'\n- stages: {}\n", "the top level is a list, not a mapping with `stages`"),
        ("schema: '2.0'\nstages:\n- report\n", "`stages` is a list, not a mapping of stage entries"),
        ("schema: '2.0'\nstages:\n  report:\n    cmd: [agentr1 report\n", "is not valid YAML at line "),
    ],
)
def test_a_lock_that_is_no_mapping_or_no_yaml_is_one_line_naming_the_file(
    project: Path, capsys, content, expected
) -> None:
    (project / "dvc.lock").write_text(content)
    rc, err, _ = _main(["track", "--dry-run"], capsys)
    assert rc == 1 and expected in err and "dvc.lock" in err and "Traceback" not in err
    assert err.count("\n") == 1 and "dvc repro" in err


def test_the_repository_lock_passes_the_check(repo_root: Path) -> None:
    """No false alarm: the committed lock's every entry resolves against the committed params."""
    entries = track.lock_entries(repo_root / "dvc.lock", load_config(repo_root / "params.yaml"))
    assert entries and all(e.stage or e.state == "skipped" for e in entries)


# ---------------------------------------------------------------- item 17: unwritable outputs


@pytest.mark.parametrize(
    ("where", "kind", "expected"),
    [
        ("/proc/agentr1/runs", "dir", "cannot be written: /proc takes no new entries"),
        ("/dev/null", "dir", "is a character device, not a folder"),
        ("FILE", "dir", "is a file, not a folder"),
        ("FILE/sub", "dir", "is a file, not a folder"),
        ("DIR", "file", "is a folder, not a regular file"),
        ("/dev/null", "file", "is a character device, not a regular file"),
    ],
)
def test_check_destination_names_the_field_and_creates_nothing(tmp_path: Path, where, kind, expected) -> None:
    from agentr1.io import check_destination

    (tmp_path / "FILE").write_text("x")
    (tmp_path / "DIR").mkdir()
    path = where.replace("FILE", str(tmp_path / "FILE")).replace("DIR", str(tmp_path / "DIR"))
    before = _listing(tmp_path)
    with pytest.raises(StageError) as err:
        check_destination(path, "evaluate.out_dir", kind=kind)
    assert str(err.value).startswith(f"evaluate.out_dir ({path}) ") and expected in str(err.value)
    assert "set evaluate.out_dir to" in str(err.value)
    assert _listing(tmp_path) == before
    check_destination(tmp_path / "new" / "deeper", "evaluate.out_dir")  # a writable one passes, made by nobody
    assert _listing(tmp_path) == before


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--set", "evaluate.out_dir=/dev/null", "evaluate", "--policy", "cold_start"],
            "evaluate.out_dir (/dev/null) is a character device",
        ),
        (
            ["--set", "train.out_dir=/proc/agentr1/runs", "train", "--run-name", "RUN"],
            "train.out_dir (/proc/agentr1/runs) cannot be written",
        ),
        (["--set", "report.out_dir=FILE", "report"], "report.out_dir (FILE) is a file, not a folder"),
    ],
)
def test_a_stage_with_an_unwritable_output_stops_before_its_work(
    project: Path, monkeypatch, capsys, argv, expected
) -> None:
    """No stage module runs (an evaluation's rollouts never start), one line, exit 1, nothing written."""
    (project / "FILE").write_text("x")
    run = sorted(load_config(project / "params.yaml").runs)[0]
    argv = [a.replace("RUN", run) for a in argv]
    monkeypatch.setattr(cli, "run_stage", lambda *a, **k: pytest.fail("the stage ran"))
    before = _listing(project)
    rc, err, seconds = _main(argv, capsys)
    assert rc == 1 and expected in err and err.count("\n") == 1 and "Traceback" not in err
    assert seconds < 1.0 and _listing(project) == before


def test_an_unwritable_artifact_root_stops_a_tracked_stage(project: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AGENTR1_ARTIFACT_ROOT", "/dev/null/artifacts")
    monkeypatch.setattr(cli, "run_stage", lambda *a, **k: pytest.fail("the stage ran"))
    rc, err, _ = _main(["--set", "tracking.enabled=true", "report"], capsys)
    assert (
        rc == 1
        and "AGENTR1_ARTIFACT_ROOT (/dev/null/artifacts) cannot be created: /dev/null is a character device" in err
    )
    assert "point AGENTR1_ARTIFACT_ROOT at a folder you can write to" in err


def test_compare_out_and_profile_write_are_checked_first(project: Path, monkeypatch, capsys) -> None:
    from agentr1.tracking import compare

    monkeypatch.setattr(compare, "connect", lambda cfg: pytest.fail("connected to the store"))
    before = _listing(project)
    rc, err, _ = _main(["compare", "--out", "/proc/agentr1/compare.png"], capsys)
    assert rc == 1 and "--out (/proc/agentr1/compare.png) cannot be written" in err and "pass --out a file path" in err
    rc, err, _ = _main(["profile", "nano", "--write", str(project)], capsys)
    assert rc == 1 and f"--write ({project}) is a folder, not a regular file" in err
    rc, err, _ = _main(["profile", "nano", "--write", "/proc/agentr1/params.yaml"], capsys)
    assert rc == 1 and "--write (/proc/agentr1/params.yaml) cannot be written" in err and "Traceback" not in err
    assert _listing(project) == before


# ---------------------------------------------------------------- item 18: serve-retriever and --params


@pytest.mark.parametrize("port", ["99999", "-1", "80x"])
def test_serve_retriever_port_out_of_range_is_a_usage_error(project: Path, capsys, port: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve-retriever", "--port", port])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "argument --port" in err and "0..65535" in err


@pytest.fixture()
def no_index(monkeypatch):
    """serve-retriever without building an index: a tiny BM25 one."""
    from agentr1.config import BM25Config
    from agentr1.retrieval import factory
    from agentr1.retrieval.bm25 import BM25Retriever

    retriever = BM25Retriever.build(
        [{"id": "p1", "title": "Miravel", "text": "Miravel is a river city."}], BM25Config()
    )
    monkeypatch.setattr(factory, "load_index", lambda *a, **k: retriever)


def test_serve_retriever_names_the_host_or_the_port_at_fault(project: Path, no_index, capsys) -> None:
    rc, err, _ = _main(["serve-retriever", "--host", "192.0.2.1", "--port", "0"], capsys)  # TEST-NET: not this machine
    assert (
        rc == 1 and "'192.0.2.1' is no address of this machine" in err and "pass --host" in err and "--port" not in err
    )
    rc, err, _ = _main(["serve-retriever", "--host", "bad..host", "--port", "0"], capsys)
    assert rc == 1 and "--host 'bad..host'" in err and "pick another --port" not in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        rc, err, _ = _main(["serve-retriever", "--port", str(taken.getsockname()[1])], capsys)
    assert rc == 1 and "the port is in use: pick another --port" in err


@pytest.mark.parametrize("which", ["/dev/null", "fifo", "big"])
def test_a_params_file_that_is_a_device_a_fifo_or_huge_is_refused_unread(project: Path, capsys, which: str) -> None:
    if which == "fifo":
        path = project / "params.fifo"
        os.mkfifo(path)  # opening it would block until a writer comes
    elif which == "big":
        path = project / "big.yaml"
        path.write_text("seed: 1\n" + "#" * (16 << 20) + "\n")
    else:
        path = Path(which)
    rc, err, seconds = _main(["--params", str(path), "track", "--dry-run"], capsys)
    assert rc == 2 and str(path) in err and seconds < 2.0
    assert ("is not a regular file" in err) if which != "big" else ("is over 16 MiB" in err)


def test_params_dev_zero_is_refused_without_reading(capsys) -> None:
    """``--params /dev/zero`` read until MemoryError; now it is never opened."""
    from agentr1.config.load import read_params_text

    with pytest.raises(ConfigError, match="params file /dev/zero is not a regular file"):
        read_params_text("/dev/zero")
