"""S3 storage for what DVC and MLflow do not cover (a report folder, a checkpoint, a log bundle).

DVC keeps pipeline data in its own S3 remote and MLflow keeps run artifacts in its artifact store;
this helper syncs plain files and folders to ``s3://<bucket>/<prefix>/...`` on AWS or any
S3-compatible server (MinIO, moto, Ceph, R2).

One module of more than 500 lines on purpose: it is :class:`S3Storage` (about 330 lines) and what
its operations share - every call (check, list, upload, download, sync) ends in the one error
translation (``_translate``: boto3's and botocore's errors -> the messages below), and every
download or ``sync_down`` writes only where :func:`safe_target` and :func:`layout_problems` allow
(a hostile key cannot choose a path). Split, those guards would sit apart from the only code that
must call them.

Credentials come only from boto3's standard chain: the environment (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``), a named profile (``AWS_PROFILE`` or
``profile=``), the shared config files or an instance role. They are never accepted as arguments,
never logged and never written anywhere by this module.

Every failure a user can fix raises a :class:`StorageError` subclass whose message says what
failed and how to fix it:

* :class:`S3CredentialsError` - no credentials found, or the server rejected them;
* :class:`S3BucketNotFoundError` - the bucket does not exist at that endpoint;
* :class:`S3EndpointError` - the endpoint cannot be reached (short connect timeout, bounded
  retries, so a wrong URL fails in seconds instead of hanging).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

from agentr1.errors import StageError

log = logging.getLogger(__name__)

# Objects up to this size are uploaded in one PUT, so their ETag is their MD5 and `sync` can skip
# unchanged files without a HEAD request. Larger ones carry their MD5 in object metadata.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
_MD5_META = "agentr1-md5"

_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidClientTokenId",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AuthorizationHeaderMalformed",
}
_DENIED_CODES = {"AccessDenied", "403", "Forbidden", "AllAccessDisabled"}
_MISSING_BUCKET_CODES = {"NoSuchBucket"}


class StorageError(StageError):
    """An S3 operation failed for a reason the user can fix; the message names the fix."""


class UnsafeKeyError(StorageError):
    """An object key would be written outside the destination folder (``..``, ``//``, an absolute
    path or a backslash): anyone who can write to the bucket could otherwise write any file."""


def safe_target(dest: Path, rel: str, key: str) -> Path:
    """``dest / rel`` for the part ``rel`` of object ``key`` below the downloaded prefix, or
    :class:`UnsafeKeyError` when it would leave ``dest``: an empty, ``.`` or ``..`` segment
    (``a/../b``, ``a//b``), a leading ``/``, a backslash or a drive letter, or a resolved path
    outside ``dest`` (a symlink inside it)."""
    parts = rel.split("/")
    bad = (
        not rel
        or rel.startswith("/")
        or "\\" in rel
        or re.match(r"[A-Za-z]:", parts[0]) is not None
        or any(p in ("", ".", "..") for p in parts)
    )
    out = dest / rel
    if not bad:
        root = dest.resolve()
        bad = root != out.resolve() and root not in out.resolve().parents
    if bad:
        raise UnsafeKeyError(
            f"refusing S3 object {key!r}: its key would write outside {dest} (no '..', empty, "
            "absolute or backslash path segments are allowed); nothing was downloaded. "
            "Remove or rename that object in the bucket"
        )
    return out


class KeyLayoutError(StorageError):
    """The objects' keys cannot all be files under the destination folder: one key is a folder of
    another (``a`` and ``a/b``, both legal in S3), a path segment is longer than the file system
    allows, or a local path in the way is not of the kind the key needs."""


NAME_MAX_BYTES = 255  # one path segment (ext4, xfs, apfs, ntfs)
PATH_MAX_BYTES = 4096  # a whole path (Linux PATH_MAX)


def layout_problems(dest: Path, rels: list[str], delete: bool = False) -> tuple[list[str], list[Path]]:
    """What keeps the relative paths ``rels`` (already :func:`safe_target`-checked) from all being
    written as files under ``dest``: ``(problems, in_the_way)``. A problem is a segment over
    :data:`NAME_MAX_BYTES` bytes, a path over :data:`PATH_MAX_BYTES`, a path that is both a file
    and a folder of another key, or (``delete`` false) a local file or folder in the way.
    ``in_the_way`` are those local paths when ``delete`` is true: a mirror removes them (nothing
    in the bucket keeps them) before it downloads."""
    problems, in_the_way = [], []
    files = set(rels)
    folders = {"/".join(r.split("/")[:i]) for r in rels for i in range(1, r.count("/") + 1)}
    for rel in sorted(files):
        long = [seg for seg in rel.split("/") if len(os.fsencode(seg)) > NAME_MAX_BYTES]
        if long:
            problems.append(
                f"{rel[:60]!r}...: a path segment of {len(os.fsencode(long[0]))} bytes (at most {NAME_MAX_BYTES})"
            )
        elif len(os.fsencode(str(dest / rel))) > PATH_MAX_BYTES:
            problems.append(f"{rel[:60]!r}...: a local path over {PATH_MAX_BYTES} bytes")
    for rel in sorted(files & folders):
        child = min(r for r in files if r.startswith(rel + "/"))
        problems.append(f"{rel!r} is an object and also the folder of {child!r}")
    if problems:
        return problems, []
    for rel in sorted(files | folders):
        local = dest / rel
        wrong = local.is_dir() if rel in files else (local.exists() and not local.is_dir())
        if wrong and not any(p in in_the_way for p in local.parents):
            if delete:
                in_the_way.append(local)
            else:
                kind = "folder" if local.is_dir() else "file"
                problems.append(f"the local {kind} {local} is in the way of {rel!r}: move or delete it")
    return problems, in_the_way


class S3CredentialsError(StorageError):
    """No credentials were found, or the server rejected them."""


class S3BucketNotFoundError(StorageError):
    """The bucket does not exist at the configured endpoint."""


class S3EndpointError(StorageError):
    """The S3 endpoint could not be reached."""


@dataclass
class SyncResult:
    """What a sync did: keys (remote) or paths (local) transferred, skipped as unchanged, deleted."""

    transferred: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def _md5(path: Path) -> str:
    h = hashlib.md5()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve_endpoint(endpoint_url: str | None = None) -> str | None:
    """The endpoint to use: the argument, else ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``
    (the variables boto3 itself reads), else None (AWS)."""
    return endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


class S3Storage:
    """Upload, download and sync files and folders under ``s3://bucket/prefix``.

    Args:
        bucket: bucket name (must exist; this class never creates buckets).
        prefix: key prefix every path is stored under ("" = bucket root).
        endpoint_url: S3-compatible endpoint, e.g. ``http://127.0.0.1:9000``; default: the
            ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` environment variables, else AWS.
        profile: AWS profile name (default: ``AWS_PROFILE`` or the default chain).
        region: region name (default: ``AWS_DEFAULT_REGION`` / profile, else ``us-east-1``).
        connect_timeout: seconds to wait for a TCP connection before giving up on an attempt.
        read_timeout: seconds to wait for a response on an open connection.
        max_attempts: total attempts per request (botocore "standard" retry mode, which retries
            throttling, 5xx and connection errors with exponential backoff).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        *,
        profile: str | None = None,
        region: str | None = None,
        connect_timeout: float = 3.0,
        read_timeout: float = 60.0,
        max_attempts: int = 3,
    ) -> None:
        if not bucket or "/" in bucket:
            raise StorageError(f"invalid bucket name {bucket!r}: pass the bare bucket name (no s3://, no '/')")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = resolve_endpoint(endpoint_url)
        self._profile = profile
        self._region = region
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_attempts = max_attempts
        self._client: Any = None

    # ------------------------------------------------------------------------------ construction
    @classmethod
    def from_url(cls, url: str, endpoint_url: str | None = None, **kwargs: Any) -> S3Storage:
        """``S3Storage.from_url("s3://bucket/some/prefix")``."""
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise StorageError(f"expected an s3://bucket/prefix URL, got {url!r}")
        return cls(parsed.netloc, parsed.path.lstrip("/"), endpoint_url, **kwargs)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _where(self) -> str:
        return f"{self.url} at {self.endpoint_url or 'AWS (default endpoint)'}"

    @property
    def client(self) -> Any:
        """The boto3 S3 client, created on first use (raises if no credentials are found)."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            session = boto3.session.Session(profile_name=self._profile)
            if session.get_credentials() is None:
                raise S3CredentialsError(
                    f"no AWS credentials found for {self._where()}: set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY in the environment, or AWS_PROFILE to a profile in "
                    "~/.aws/credentials (never put keys in params.yaml or .dvc/config)"
                )
            region = self._region or session.region_name or "us-east-1"
            config = Config(
                connect_timeout=self._connect_timeout,
                read_timeout=self._read_timeout,
                retries={"max_attempts": self._max_attempts, "mode": "standard"},
                signature_version="s3v4",
            )
            self._client = session.client("s3", endpoint_url=self.endpoint_url, region_name=region, config=config)
        return self._client

    # ------------------------------------------------------------------------------ errors
    def _translate(self, exc: Exception, action: str) -> StorageError:
        """Map a botocore/boto3 exception to a StorageError that names the fix."""
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
            ReadTimeoutError,
        )

        if isinstance(exc, StorageError):
            return exc
        if isinstance(exc, S3UploadFailedError) and isinstance(exc.__context__, Exception):
            inner = self._translate(exc.__context__, action)
            if type(inner) is not StorageError:
                return inner
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return S3CredentialsError(
                f"{action} {self._where()}: incomplete or missing AWS credentials ({exc}); set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE"
            )
        if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError, ReadTimeoutError)):
            return S3EndpointError(
                f"{action} {self._where()}: cannot reach the S3 endpoint ({type(exc).__name__}); "
                "check that the server is running and that endpoint_url / AWS_ENDPOINT_URL is "
                "the right scheme://host:port (no endpoint = AWS, which needs network access)"
            )
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _CREDENTIAL_CODES:
                return S3CredentialsError(
                    f"{action} {self._where()}: the server rejected the credentials ({code}); "
                    "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the AWS_PROFILE in use) "
                    "against this endpoint"
                )
            if code in _MISSING_BUCKET_CODES or (code in {"404", "NotFound"} and status == 404 and action == "check"):
                return S3BucketNotFoundError(
                    f"{action} {self._where()}: bucket {self.bucket!r} does not exist; create it "
                    f"(e.g. `aws s3 mb s3://{self.bucket}"
                    + (f" --endpoint-url {self.endpoint_url}" if self.endpoint_url else "")
                    + "`) or fix the bucket name"
                )
            if code in _DENIED_CODES or status == 403:
                return S3CredentialsError(
                    f"{action} {self._where()}: access denied ({code or status}); the credentials "
                    f"are not allowed to use bucket {self.bucket!r}: fix the key pair or grant "
                    "s3:ListBucket/GetObject/PutObject on it"
                )
            return StorageError(f"{action} {self._where()}: S3 error {code or status}: {exc}")
        return StorageError(f"{action} {self._where()}: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------------------ keys
    def key(self, relative: str | PurePosixPath = "") -> str:
        rel = str(relative).strip("/")
        return "/".join(p for p in (self.prefix, rel) if p)

    def _iter_objects(self, sub: str = "") -> Iterator[dict[str, Any]]:
        base = self.key(sub)
        list_prefix = f"{base}/" if base else ""
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=list_prefix):
            yield from page.get("Contents", [])

    # ------------------------------------------------------------------------------ operations
    def check(self) -> None:
        """Verify credentials, endpoint and bucket with one cheap request; raise a StorageError."""
        try:
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.key(), MaxKeys=1)
        except Exception as exc:  # noqa: BLE001 - translated into an actionable error
            raise self._translate(exc, "check") from exc

    def list(self, sub: str = "") -> list[str]:
        """Keys under ``prefix/sub``, relative to ``prefix``."""
        try:
            base = self.key()
            out = []
            for obj in self._iter_objects(sub):
                k = obj["Key"]
                out.append(k[len(base) + 1 :] if base else k)
            return sorted(out)
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, "list") from exc

    def _put(self, path: Path, key: str) -> None:
        from boto3.s3.transfer import TransferConfig

        self.client.upload_file(
            str(path),
            self.bucket,
            key,
            ExtraArgs={"Metadata": {_MD5_META: _md5(path)}},
            Config=TransferConfig(multipart_threshold=MULTIPART_THRESHOLD),
        )

    def upload(self, local: str | os.PathLike[str], dest: str | None = None) -> list[str]:
        """Upload a file or a whole folder to ``prefix/dest`` (default: its name); returns keys."""
        src = Path(local)
        if not src.exists():
            raise StorageError(f"upload: local path {src} does not exist")
        dest = src.name if dest is None else dest
        try:
            if src.is_file():
                key = self.key(dest)
                self._put(src, key)
                log.info("uploaded %s -> s3://%s/%s", src, self.bucket, key)
                return [key]
            keys = []
            for f in sorted(p for p in src.rglob("*") if p.is_file()):
                key = self.key(PurePosixPath(dest) / f.relative_to(src).as_posix())
                self._put(f, key)
                keys.append(key)
            log.info("uploaded %d files from %s -> s3://%s/%s", len(keys), src, self.bucket, self.key(dest))
            return keys
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, "upload") from exc

    def download(self, src: str, local: str | os.PathLike[str]) -> list[Path]:
        """Download ``prefix/src`` (one object, or every object under it) to ``local``."""
        from botocore.exceptions import ClientError

        dest = Path(local)
        key = self.key(src)
        try:
            try:
                self.client.head_object(Bucket=self.bucket, Key=key)
                is_object = True
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) not in {"404", "NoSuchKey", "NotFound"}:
                    raise
                is_object = False
            if is_object:
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.client.download_file(self.bucket, key, str(dest))
                return [dest]
            written = []
            for obj, out in self._targets(list(self._iter_objects(src)), key, dest)[0]:
                out.parent.mkdir(parents=True, exist_ok=True)
                self.client.download_file(self.bucket, obj["Key"], str(out))
                written.append(out)
        except (UnsafeKeyError, KeyLayoutError):
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, "download") from exc
        if not written:
            raise StorageError(f"download: nothing at s3://{self.bucket}/{key} ({self._where()})")
        return written

    def _targets(
        self, objects: list[dict[str, Any]], base: str, dest: Path, delete: bool = False
    ) -> tuple[list[tuple[dict[str, Any], Path]], list[Path]]:
        """``(object, local path)`` for every object under ``base`` and the local paths in the way
        (``delete`` only, :func:`layout_problems`), every key checked by :func:`safe_target` and
        :func:`layout_problems` before anything is written: one bad key refuses the whole transfer."""
        cut = len(base) + 1 if base else 0
        files = [obj for obj in objects if not obj["Key"].endswith("/")]  # "folder" marker objects hold no file
        pairs = [(obj, safe_target(dest, obj["Key"][cut:], obj["Key"])) for obj in files]
        problems, in_the_way = layout_problems(dest, [obj["Key"][cut:] for obj in files], delete)
        if problems:
            more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
            raise KeyLayoutError(
                f"the objects under s3://{self.bucket}/{base} cannot all be files in {dest}: "
                f"{'; '.join(problems[:5])}{more}. Nothing was downloaded; rename or remove those "
                "objects (or the local paths named)"
            )
        return pairs, in_the_way

    def _remote_md5(self, obj: dict[str, Any]) -> str | None:
        etag = str(obj.get("ETag", "")).strip('"')
        if etag and "-" not in etag:
            return etag
        head = self.client.head_object(Bucket=self.bucket, Key=obj["Key"])
        return head.get("Metadata", {}).get(_MD5_META)

    def sync_up(self, local_dir: str | os.PathLike[str], dest: str = "", delete: bool = False) -> SyncResult:
        """Make ``prefix/dest`` mirror ``local_dir``: upload new or changed files (by MD5), skip
        unchanged ones, and with ``delete=True`` remove remote keys that no longer exist locally."""
        src = Path(local_dir)
        if not src.is_dir():
            raise StorageError(f"sync_up: {src} is not a directory")
        result = SyncResult()
        try:
            base = self.key(dest)
            remote = {o["Key"]: o for o in self._iter_objects(dest)}
            local_keys = set()
            for f in sorted(p for p in src.rglob("*") if p.is_file()):
                key = self.key(PurePosixPath(dest) / f.relative_to(src).as_posix())
                local_keys.add(key)
                obj = remote.get(key)
                if obj is not None and obj.get("Size") == f.stat().st_size and self._remote_md5(obj) == _md5(f):
                    result.skipped.append(key)
                    continue
                self._put(f, key)
                result.transferred.append(key)
            if delete:
                for key in sorted(set(remote) - local_keys):
                    self.client.delete_object(Bucket=self.bucket, Key=key)
                    result.deleted.append(key)
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, "sync_up") from exc
        log.info(
            "sync_up %s -> s3://%s/%s: %d uploaded, %d unchanged, %d deleted",
            src,
            self.bucket,
            base,
            len(result.transferred),
            len(result.skipped),
            len(result.deleted),
        )
        return result

    def sync_down(self, src: str, local_dir: str | os.PathLike[str], delete: bool = False) -> SyncResult:
        """Make ``local_dir`` mirror ``prefix/src``: download new or changed objects (by MD5), and
        with ``delete=True`` remove local files that are not in the bucket."""
        dest = Path(local_dir)
        result = SyncResult()
        try:
            base = self.key(src)
            seen = set()
            targets, in_the_way = self._targets(list(self._iter_objects(src)), base, dest, delete)
            for path in in_the_way:  # only with delete: stale local paths where a key needs the other kind
                shutil.rmtree(path) if path.is_dir() else path.unlink()
                result.deleted.append(str(path))
            for obj, out in targets:
                seen.add(out.resolve())
                if out.is_file() and out.stat().st_size == obj.get("Size") and _md5(out) == self._remote_md5(obj):
                    result.skipped.append(str(out))
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                self.client.download_file(self.bucket, obj["Key"], str(out))
                result.transferred.append(str(out))
        except (UnsafeKeyError, KeyLayoutError):
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._translate(exc, "sync_down") from exc
        if delete and dest.is_dir():
            for f in sorted(p for p in dest.rglob("*") if p.is_file()):
                if f.resolve() not in seen:
                    f.unlink()
                    result.deleted.append(str(f))
        log.info(
            "sync_down s3://%s/%s -> %s: %d downloaded, %d unchanged, %d deleted",
            self.bucket,
            base,
            dest,
            len(result.transferred),
            len(result.skipped),
            len(result.deleted),
        )
        return result


# ---------------------------------------------------------------------------------- bucket mirror
# A folder that holds a whole bucket, one file per object (``folder/<key>``): what keeps an
# in-memory S3 (moto_server in scripts/topology.sh) across a restart. `save_bucket` before the
# server stops, `restore_bucket` into the fresh, empty bucket after it starts.


def save_bucket(store: S3Storage, folder: str | os.PathLike[str]) -> SyncResult:
    """Make ``folder`` an exact copy of the objects under ``store``'s prefix: afterwards
    ``folder/<key>`` holds the bytes of each object ``<key>`` (relative to the prefix) and nothing
    else - files whose object is gone are deleted, unchanged ones (same size and MD5) are not
    downloaded again. A key that is not a plain path inside ``folder`` (``..``, ``//``, absolute)
    refuses the whole save before anything is written (:class:`UnsafeKeyError`), and so do keys
    that cannot all be files (``a`` beside ``a/b``, a segment over 255 bytes: :class:`KeyLayoutError`);
    a stale local file or folder where a key needs the other kind is removed first. Kept: keys and
    bytes. Not kept: "folder" marker keys (ending in ``/``, they hold no file), object metadata
    and content types, multipart ETags."""
    return store.sync_down("", folder, delete=True)


def restore_bucket(store: S3Storage, folder: str | os.PathLike[str]) -> SyncResult:
    """Upload every file ``folder/<path>`` to the key ``<path>`` under ``store``'s prefix, the
    inverse of :func:`save_bucket` (objects already there with the same bytes are skipped; nothing
    is deleted). ``folder`` must be a directory."""
    if not Path(folder).is_dir():
        raise StorageError(f"restore_bucket: {folder} is not a directory; nothing to restore (save_bucket writes one)")
    return store.sync_up(folder, "")


def mirror_summary(folder: str | os.PathLike[str]) -> str:
    """``"<n> objects, <size> (<top>/ <n>, ...)"``: the files under ``folder`` counted by the first
    segment of their path (``dvcstore/``, ``mlflow/``; a top-level file counts under its name);
    ``<size>`` is their total in MB (10**6 bytes), or in kB below 1 MB."""
    root = Path(folder)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    tops: dict[str, int] = {}
    for p in files:
        parts = p.relative_to(root).parts
        top = parts[0] + ("/" if len(parts) > 1 else "")
        tops[top] = tops.get(top, 0) + 1
    size = sum(p.stat().st_size for p in files)
    shown = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"
    detail = ", ".join(f"{top} {n}" for top, n in tops.items())
    return f"{len(files)} objects, {shown}" + (f" ({detail})" if detail else "")
