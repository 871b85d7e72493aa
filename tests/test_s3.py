"""S3 integration against a real S3-compatible server on 127.0.0.1 (``moto_server``).

The server runs with IAM authentication on (``INITIAL_NO_AUTH_ACTION_COUNT``): the first three
unauthenticated requests create a user, its policy and its access key; from then on only that
key pair is accepted, so "bad credentials" is a real rejection by the server.

* ``dvc push`` / ``dvc pull`` round trip of the tiny project's ``prepare`` output: cache and
  outputs deleted, pulled back, identical hashes; credentials live in ``.dvc/config.local``
  (git-ignored), never in ``.dvc/config``;
* an MLflow run (SQLite backend in tmp, artifact location ``s3://...``) whose artifacts land in
  the bucket and load back;
* ``agentr1.tracking.storage.S3Storage`` sync round trip and its errors: bad credentials,
  missing credentials, missing bucket, unreachable endpoint;
* the local topology's persistent S3 (``save_bucket`` / ``restore_bucket``): objects stored,
  moto stopped and started again on the same port, the same keys with the same bytes back
  (auth off, as ``scripts/topology.sh`` runs it), and the script's guards on its mirror folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import _tiny_project as tiny

boto3 = pytest.importorskip("boto3")
BUCKET = "agentr1-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moto_bin() -> str:
    moto = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if moto is None:
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    return moto


@contextlib.contextmanager
def _moto_server(port: int, log: Path, env: dict[str, str] | None = None):
    """A ``moto_server`` on 127.0.0.1:``port``, up within 60 s (else RuntimeError with its log),
    terminated (then killed after 10 s) on exit."""
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [_moto_bin(), "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=subprocess.STDOUT, env=env
        )
    try:
        deadline = time.monotonic() + 60
        while True:  # a TCP probe: an HTTP request would use up an unauthenticated action
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start: {log.read_text()}") from None
                time.sleep(0.3)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}
    with _moto_server(port, log, env):
        boot = dict(
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam = boto3.client("iam", **boot)
        iam.create_user(UserName="agentr1")
        iam.put_user_policy(
            UserName="agentr1",
            PolicyName="s3-all",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        key = iam.create_access_key(UserName="agentr1")["AccessKey"]
        creds = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"],
        )
        client.create_bucket(Bucket=BUCKET)
        yield {"endpoint": endpoint, "creds": creds, "client": client}


@pytest.fixture
def aws_env(s3, monkeypatch, tmp_path):
    """Credentials from the environment only; no ~/.aws files, no stray endpoint variables."""
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    for k, v in s3["creds"].items():
        monkeypatch.setenv(k, v)
    return s3


def _keys(client, prefix: str) -> list[str]:
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return out


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# ----------------------------------------------------------------------------------- DVC
@pytest.mark.slow
def test_dvc_push_pull_round_trip(s3, tmp_path):
    project = tiny.make_project(tmp_path / "proj")
    creds = s3["creds"]
    # The commands of docs/OPERATIONS.md, section "DVC remote and MLflow artifacts on S3" (remote URL + endpoint tracked; keys in config.local)
    tiny.sh(["dvc", "remote", "add", "-d", "s3remote", f"s3://{BUCKET}/dvcstore"], project)
    tiny.sh(["dvc", "remote", "modify", "s3remote", "endpointurl", s3["endpoint"]], project)
    tiny.sh(["dvc", "remote", "modify", "--local", "s3remote", "access_key_id", creds["AWS_ACCESS_KEY_ID"]], project)
    tiny.sh(
        ["dvc", "remote", "modify", "--local", "s3remote", "secret_access_key", creds["AWS_SECRET_ACCESS_KEY"]], project
    )
    tracked = (project / ".dvc" / "config").read_text()
    assert s3["endpoint"] in tracked and creds["AWS_SECRET_ACCESS_KEY"] not in tracked
    assert creds["AWS_ACCESS_KEY_ID"] not in tracked
    assert tiny.sh(["git", "check-ignore", ".dvc/config.local"], project).returncode == 0

    tiny.sh(["dvc", "repro", "prepare"], project)
    before = _hashes(project / "data" / "processed")
    assert before and "manifest.json" in before
    push = tiny.sh(["dvc", "push", "prepare"], project)
    assert "pushed" in push.stdout.lower() or "file" in push.stdout.lower(), push.stdout
    assert _keys(s3["client"], "dvcstore/files/md5/"), "dvc push stored nothing in the bucket"

    shutil.rmtree(project / ".dvc" / "cache")
    shutil.rmtree(project / "data" / "processed")
    tiny.sh(["dvc", "pull", "prepare"], project)
    assert _hashes(project / "data" / "processed") == before
    status = tiny.sh(["dvc", "status", "prepare"], project).stdout
    assert "up to date" in status, status

    # the same remote with credentials from the environment instead of config.local
    (project / ".dvc" / "config.local").unlink()
    shutil.rmtree(project / ".dvc" / "cache")
    shutil.rmtree(project / "data" / "processed")
    tiny.sh(["dvc", "pull", "prepare"], project, extra_env={**creds, "AWS_DEFAULT_REGION": "us-east-1"})
    assert _hashes(project / "data" / "processed") == before

    # and bad credentials are refused by the server, with DVC saying so
    shutil.rmtree(project / ".dvc" / "cache")
    bad = tiny.sh(
        ["dvc", "pull", "prepare"],
        project,
        check=False,
        extra_env={
            "AWS_ACCESS_KEY_ID": "AKIAWRONG",
            "AWS_SECRET_ACCESS_KEY": "wrong",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
    )
    assert bad.returncode != 0
    assert "InvalidAccessKeyId" in bad.stdout + bad.stderr or "403" in bad.stdout + bad.stderr


# ----------------------------------------------------------------------------------- MLflow
@pytest.mark.slow
def test_mlflow_artifacts_land_in_s3_and_load_back(aws_env, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", aws_env["endpoint"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp_id = client.create_experiment("agentr1-s3", artifact_location=f"s3://{BUCKET}/mlflow")
    report = tmp_path / "report.md"
    report.write_text("# results\n| run | EM |\n|---|---|\n| grpo | 0.41 |\n")
    mlflow.set_tracking_uri(uri)
    try:
        with mlflow.start_run(experiment_id=exp_id, run_name="evaluate") as run:
            mlflow.log_metric("eval/em", 0.41)
            mlflow.log_artifact(str(report), artifact_path="report")
            mlflow.log_dict({"em": 0.41, "f1": 0.5}, "metrics/summary.json")
    finally:
        mlflow.set_tracking_uri(None)
    run_id = run.info.run_id
    assert client.get_run(run_id).info.artifact_uri == f"s3://{BUCKET}/mlflow/{run_id}/artifacts"
    keys = set(_keys(aws_env["client"], f"mlflow/{run_id}/"))
    assert {f"mlflow/{run_id}/artifacts/report/report.md", f"mlflow/{run_id}/artifacts/metrics/summary.json"} <= keys

    local = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="report", tracking_uri=uri, dst_path=str(tmp_path / "dl")
    )
    assert (Path(local) / "report.md").read_text() == report.read_text()
    loaded = mlflow.artifacts.load_dict(f"s3://{BUCKET}/mlflow/{run_id}/artifacts/metrics/summary.json")
    assert loaded == {"em": 0.41, "f1": 0.5}


# ----------------------------------------------------------------------------------- storage
def test_storage_sync_round_trip(aws_env, tmp_path):
    from agentr1.tracking.storage import S3Storage

    src = tmp_path / "report"
    (src / "plots").mkdir(parents=True)
    (src / "report.md").write_text("# report\n")
    (src / "plots" / "em.png").write_bytes(os.urandom(70_000))
    (src / "metrics.json").write_text(json.dumps({"em": 0.4}))
    store = S3Storage(BUCKET, "runs/nightly", endpoint_url=aws_env["endpoint"])
    store.check()

    first = store.sync_up(src, "report")
    assert sorted(first.transferred) == [
        "runs/nightly/report/metrics.json",
        "runs/nightly/report/plots/em.png",
        "runs/nightly/report/report.md",
    ]
    again = store.sync_up(src, "report")
    assert again.transferred == [] and len(again.skipped) == 3
    (src / "metrics.json").write_text(json.dumps({"em": 0.5}))
    (src / "report.md").unlink()
    third = store.sync_up(src, "report", delete=True)
    assert third.transferred == ["runs/nightly/report/metrics.json"]
    assert third.deleted == ["runs/nightly/report/report.md"]
    assert store.list("report") == ["report/metrics.json", "report/plots/em.png"]

    dst = tmp_path / "copy"
    down = store.sync_down("report", dst)
    assert len(down.transferred) == 2 and _hashes(dst) == _hashes(src)
    assert store.sync_down("report", dst).transferred == []
    (dst / "stale.txt").write_text("x")
    assert store.sync_down("report", dst, delete=True).deleted == [str(dst / "stale.txt")]

    # single files and whole folders; from_url
    ck = tmp_path / "ckpt.safetensors"
    ck.write_bytes(os.urandom(10_000))
    assert store.upload(ck, "checkpoints/ckpt.safetensors") == ["runs/nightly/checkpoints/ckpt.safetensors"]
    other = S3Storage.from_url(f"s3://{BUCKET}/runs/nightly", endpoint_url=aws_env["endpoint"])
    got = other.download("checkpoints/ckpt.safetensors", tmp_path / "back" / "ckpt.safetensors")
    assert got[0].read_bytes() == ck.read_bytes()
    files = other.download("report", tmp_path / "back" / "report")
    assert len(files) == 2


@pytest.mark.parametrize(
    "bad",
    [
        "../escape.txt",
        "a/../../escape.txt",
        "a//etc/escape.txt",
        "/abs/escape.txt",
        "a\\..\\..\\escape.txt",
        "C:/escape.txt",
        "./x.txt",
    ],
)
def test_hostile_keys_are_refused_and_nothing_is_written(aws_env, tmp_path, bad):
    from agentr1.tracking.storage import S3Storage, UnsafeKeyError

    prefix = f"hostile/{abs(hash(bad)) % 10_000}"
    client = aws_env["client"]
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/report/good.txt", Body=b"fine")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/report/{bad}", Body=b"owned")
    store = S3Storage(BUCKET, prefix, endpoint_url=aws_env["endpoint"])
    dest = tmp_path / "deep" / "inside" / "dest"
    for call in (lambda: store.sync_down("report", dest), lambda: store.download("report", dest)):
        with pytest.raises(UnsafeKeyError, match="refusing S3 object .*nothing was downloaded"):
            call()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == [], written  # not even the good file: the transfer is refused as a whole


@pytest.mark.parametrize("keys", [["a", "a/b"], ["report/x.txt", "report/" + "n" * 300 + ".txt"], ["d/e/f", "d/e"]])
def test_bucket_save_checks_every_key_before_writing(aws_env, tmp_path, keys):
    """Issue 26 item 8: keys ``a`` and ``a/b`` (legal in S3) or a 300-byte name made save_bucket fail
    part-way and leave a partial mirror."""
    from agentr1.tracking.storage import KeyLayoutError, S3Storage, save_bucket

    prefix = f"layout/{abs(hash(tuple(keys))) % 10_000}"
    client = aws_env["client"]
    for key in ["aaa-first.txt", *keys, "zzz-last.txt"]:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=key.encode())
    store = S3Storage(BUCKET, prefix, endpoint_url=aws_env["endpoint"])
    mirror = tmp_path / "mirror"
    with pytest.raises(KeyLayoutError, match="cannot all be files .*Nothing was downloaded"):
        save_bucket(store, mirror)
    assert not mirror.exists() or [p for p in mirror.rglob("*")] == []


def test_bucket_save_replaces_a_stale_local_path_in_the_way(aws_env, tmp_path):
    from agentr1.tracking.storage import KeyLayoutError, S3Storage, save_bucket

    prefix = "layout/stale"
    client = aws_env["client"]
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/a/b", Body=b"now a folder")
    store = S3Storage(BUCKET, prefix, endpoint_url=aws_env["endpoint"])
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "a").write_text("was an object")
    saved = save_bucket(store, mirror)
    assert (mirror / "a" / "b").read_bytes() == b"now a folder" and str(mirror / "a") in saved.deleted
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a").write_text("mine")
    with pytest.raises(KeyLayoutError, match="in the way"):  # without delete nothing local is removed
        store.sync_down("", tmp_path / "plain")
    assert (tmp_path / "plain" / "a").read_text() == "mine"


def test_safe_target_accepts_ordinary_keys(tmp_path):
    from agentr1.tracking.storage import UnsafeKeyError, safe_target

    assert safe_target(tmp_path, "plots/em.png", "k") == tmp_path / "plots" / "em.png"
    assert safe_target(tmp_path, "run:2026-12-01T10:00/metrics.json", "k").name == "metrics.json"
    (tmp_path / "link").symlink_to("/tmp")
    for bad in ("", "..", "a/..", "a//b", "/x", "a\\b", "link/x"):
        with pytest.raises(UnsafeKeyError):
            safe_target(tmp_path, bad, "k")


def test_storage_errors_name_the_fix(aws_env, tmp_path, monkeypatch):
    from agentr1.tracking.storage import (
        S3BucketNotFoundError,
        S3CredentialsError,
        S3EndpointError,
        S3Storage,
        StorageError,
    )

    ep = aws_env["endpoint"]
    # missing bucket
    with pytest.raises(S3BucketNotFoundError) as ei:
        S3Storage("no-such-bucket-x", "p", endpoint_url=ep).check()
    msg = str(ei.value)
    assert (
        "bucket 'no-such-bucket-x' does not exist" in msg
        and f"aws s3 mb s3://no-such-bucket-x --endpoint-url {ep}" in msg
    )
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(S3BucketNotFoundError):
        S3Storage("no-such-bucket-x", endpoint_url=ep).upload(tmp_path / "f.txt")  # the upload path too
    with pytest.raises(StorageError, match="nothing at"):
        S3Storage(BUCKET, "empty-prefix", endpoint_url=ep).download("missing", tmp_path / "x")

    # bad credentials: rejected by the server; the message never echoes the secret
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-never-shown")
    with pytest.raises(S3CredentialsError) as ei:
        S3Storage(BUCKET, endpoint_url=ep).check()
    msg = str(ei.value)
    assert "rejected the credentials (InvalidAccessKeyId)" in msg and "AWS_ACCESS_KEY_ID" in msg
    assert "s3cr3t-value-never-shown" not in msg and "AKIAWRONG" not in msg
    with pytest.raises(S3CredentialsError):
        S3Storage(BUCKET, endpoint_url=ep).upload(tmp_path / "f.txt")

    # no credentials at all
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(S3CredentialsError, match="no AWS credentials found.*AWS_PROFILE"):
        S3Storage(BUCKET, endpoint_url=ep).check()

    # unreachable endpoint: fails fast (short connect timeout, bounded retries)
    for k, v in aws_env["creds"].items():
        monkeypatch.setenv(k, v)
    dead = f"http://127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    with pytest.raises(S3EndpointError) as ei:
        S3Storage(BUCKET, endpoint_url=dead, connect_timeout=1, max_attempts=2).check()
    assert time.monotonic() - t0 < 30
    assert "cannot reach the S3 endpoint" in str(ei.value) and dead in str(ei.value)
    # endpoint from the environment, as boto3 reads it
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", ep)
    S3Storage(BUCKET).check()
    with pytest.raises(StorageError, match="expected an s3://bucket/prefix URL"):
        S3Storage.from_url("http://x/y")


# ----------------------------------------------------------------------------- local topology's S3
def _mirror_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_bucket_mirror_keeps_objects_across_a_moto_restart(tmp_path, monkeypatch):
    """What scripts/topology.sh does around a moto restart: ``save_bucket`` before `down` stops the
    in-memory server, ``restore_bucket`` into the empty bucket of the fresh server `up` starts on
    the same port. The same keys come back with the same bytes (a DVC remote object, MLflow
    artifacts, an empty file, a key with a space, a multipart upload); the next save mirrors
    deletions and additions."""
    from boto3.s3.transfer import TransferConfig
    from botocore.exceptions import ClientError

    from agentr1.tracking.storage import S3Storage, StorageError, mirror_summary, restore_bucket, save_bucket

    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local-dev")  # moto without IAM auth, as topology.sh runs it
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local-dev")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
    port, bucket = _free_port(), "agentr1"
    endpoint = f"http://127.0.0.1:{port}"
    run = "mlflow/1/0123456789abcdef/artifacts"
    objects = {
        "dvcstore/files/md5/3a/4fe1c0ffee": os.urandom(70_000),
        "dvcstore/files/md5/9b/00aa11.dir": b'[{"md5": "3a4fe1c0ffee", "relpath": "train.jsonl"}]',
        f"{run}/model/model.safetensors": os.urandom(6 * 1024 * 1024 + 17),  # uploaded in 2 parts
        f"{run}/plots/em curve.png": os.urandom(3_000),
        f"{run}/empty.txt": b"",
    }
    mirror = tmp_path / "topology" / "s3" / bucket

    with _moto_server(port, tmp_path / "moto-1.log", env):
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=bucket)
        for key, body in objects.items():
            if len(body) > 5 * 1024 * 1024:
                src = tmp_path / "big.bin"
                src.write_bytes(body)
                client.upload_file(
                    str(src),
                    bucket,
                    key,
                    Config=TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024),
                )
                assert client.head_object(Bucket=bucket, Key=key)["ETag"].endswith('-2"')
            else:
                client.put_object(Bucket=bucket, Key=key, Body=body)
        store = S3Storage(bucket, endpoint_url=endpoint)
        saved = save_bucket(store, mirror)
        assert len(saved.transferred) == len(objects) and saved.deleted == []
        assert _mirror_bytes(mirror) == objects

    # `down` happened: a new moto on the same port starts empty, so only the restore brings them back
    with _moto_server(port, tmp_path / "moto-2.log", env):
        client = boto3.client("s3", endpoint_url=endpoint)
        with pytest.raises(ClientError):
            client.head_bucket(Bucket=bucket)
        client.create_bucket(Bucket=bucket)
        restored = restore_bucket(store, mirror)
        assert sorted(restored.transferred) == sorted(objects)
        assert store.list() == sorted(objects)
        assert {k: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in objects} == objects
        assert restore_bucket(store, mirror).transferred == []  # a second restore uploads nothing

        # after `up`: `dvc gc -c` deleted one object, `dvc push` added one; the next save mirrors both
        gone, new = "dvcstore/files/md5/3a/4fe1c0ffee", "dvcstore/files/md5/ff/new0001"
        client.delete_object(Bucket=bucket, Key=gone)
        client.put_object(Bucket=bucket, Key=new, Body=b"new object")
        again = save_bucket(store, mirror)
        assert again.transferred == [str(mirror / new)] and again.deleted == [str(mirror / gone)]
        assert len(again.skipped) == len(objects) - 1  # unchanged files are not downloaded again
        expected = {**{k: v for k, v in objects.items() if k != gone}, new: b"new object"}
        assert _mirror_bytes(mirror) == expected
        size = sum(map(len, expected.values())) / 1e6
        assert mirror_summary(mirror) == f"5 objects, {size:.1f} MB (dvcstore/ 2, mlflow/ 3)"

    with pytest.raises(StorageError, match="is not a directory; nothing to restore"):
        restore_bucket(store, tmp_path / "no-such-mirror")


def test_topology_script_guards_its_s3_mirror(tmp_path):
    """The bucket name is the mirror's folder name, so the script refuses one that is not a valid
    S3 bucket name before it writes anything; `save` without a moto it started refuses too."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "topology.sh"
    topo = tmp_path / "topology"
    env = {**os.environ, "AGENTR1_TOPOLOGY_DIR": str(topo), "PREFECT_HOME": str(tmp_path / "prefect")}
    for bad in ("../../etc", "a/b", "Agentr1", "ab", "a..b"):
        r = subprocess.run(
            ["bash", str(script), "status"], env={**env, "S3_BUCKET": bad}, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 2 and f"S3_BUCKET={bad} is not an S3 bucket name" in r.stderr, r.stderr
    assert not topo.exists()
    r = subprocess.run(
        ["bash", str(script), "save"], env={**env, "S3_BUCKET": "agentr1"}, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1 and "nothing to save" in r.stderr, r.stderr


def test_topology_down_removes_the_dvc_remote_up_set(tmp_path):
    """`up` points the git-ignored .dvc/config.local at the topology's S3 (and records that it
    did); `down` removes that remote again - left behind, it makes `dvc status -c` of a plain
    shell fail on the stopped S3 - and keeps a remote of the user's own."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "scripts").mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "scripts" / "topology.sh", project / "scripts" / "topology.sh")
    for cmd in (
        ["git", "init", "-q"],
        ["dvc", "init", "-q"],
        ["dvc", "config", "core.analytics", "false"],
        ["dvc", "remote", "add", "--local", "-d", "agentr1-local", "s3://agentr1/dvcstore"],
        ["dvc", "remote", "modify", "--local", "agentr1-local", "endpointurl", "http://127.0.0.1:9"],
        ["dvc", "remote", "add", "--local", "mine", str(tmp_path / "my-remote")],
    ):
        tiny.sh(cmd, project)
    topo = tmp_path / "topology"
    topo.mkdir()
    (topo / "dvc-remote").write_text("agentr1-local\n")  # what `up` records when it sets the remote
    env = {
        **tiny.env(),
        "AGENTR1_TOPOLOGY_DIR": str(topo),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "BIN": str(Path(sys.executable).parent),
    }
    r = subprocess.run(
        ["bash", "scripts/topology.sh", "down"], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "removed DVC remote agentr1-local from .dvc/config.local" in r.stdout
    assert tiny.sh(["dvc", "remote", "list"], project).stdout.split() == ["mine", str(tmp_path / "my-remote")]
    assert not (topo / "dvc-remote").exists()
    r = subprocess.run(
        ["bash", "scripts/topology.sh", "down"], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )  # nothing recorded any more: the user's remote stays
    assert r.returncode == 0 and "DVC remote" not in r.stdout, r.stdout + r.stderr
    assert "mine" in tiny.sh(["dvc", "remote", "list"], project).stdout
