"""The retention archive's files: Parquet tables and one JSON manifest per namespace.

The archive lives at ``RMS_ARCHIVE_URL``: a local folder, or any fsspec URL (``s3://…``) when
fsspec is installed. Every file is written to a temporary name and renamed into place, so a
reader never sees half a file and a killed writer leaves at most a stray temporary file.

Layout: ``<url>/<namespace>/manifest.json`` and ``<url>/<namespace>/<pass>-<table>.parquet``.
The manifest lists every batch (``batches``, in order) with its files (name, sha256, rows) and
the checkpoint of each chain it cut (``chains``: target id → type, seq, hash, ts, fold).

Every column is a string or an integer: timestamps as ISO 8601 to the microsecond, JSON as its
canonical text, so a row read back hashes exactly as it did in the database.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

MANIFEST = "manifest.json"
FORMAT = 1


class ArchiveMissing(Exception):
    """The archive (or a file the manifest names) is not there."""


class Archive:
    """One namespace's folder of the archive."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url = local_path(url).rstrip("/")
        self.namespace = namespace
        self.root = f"{self.url}/{namespace}"
        self._fs = _filesystem(self.url)

    # --- bytes ---------------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def exists(self, name: str) -> bool:
        return self._fs.exists(self.path(name))

    def read_bytes(self, name: str) -> bytes:
        try:
            with self._fs.open(self.path(name), "rb") as fh:
                return fh.read()
        except FileNotFoundError as exc:
            raise ArchiveMissing(f"{self.path(name)} is missing") from exc

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically: a temporary file, then a rename."""
        self._fs.makedirs(self.root, exist_ok=True)
        tmp = self.path(f".{name}.{uuid.uuid4().hex}.tmp")
        with self._fs.open(tmp, "wb") as fh:
            fh.write(data)
        self._fs.mv(tmp, self.path(name))

    def remove(self, name: str) -> None:
        """Delete ``name`` (nothing when it is already gone)."""
        if self.exists(name):
            self._fs.rm(self.path(name))

    def size(self) -> int:
        """Bytes of every file the manifest names (0 without a manifest)."""
        manifest = self.manifest()
        return sum(
            f["bytes"]
            for b in manifest["batches"]
            for f in [*b["files"].values(), b["chains_file"]]
        )

    # --- manifest ------------------------------------------------------------------------------

    def manifest(self) -> dict:
        if not self.exists(MANIFEST):
            return {"format": FORMAT, "namespace": self.namespace, "batches": []}
        return json.loads(self.read_bytes(MANIFEST))

    def write_manifest(self, manifest: dict) -> None:
        self.write_bytes(MANIFEST, json.dumps(manifest, sort_keys=True).encode())

    # --- tables --------------------------------------------------------------------------------

    def write_table(self, name: str, columns: dict[str, list]) -> dict:
        """Write one Parquet file; its manifest entry (bytes, sha256, rows)."""
        table = pa.table({k: pa.array(v, type=_type(v)) for k, v in columns.items()})
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        data = buf.getvalue()
        self.write_bytes(name, data)
        return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "rows": len(table)}

    def read_column(self, name: str, column: str) -> list:
        data = self.read_bytes(name)
        return pq.read_table(io.BytesIO(data), columns=[column]).column(column).to_pylist()

    def write_arrow(self, name: str, table: pa.Table) -> dict:
        """``write_table`` for a pyarrow table already built."""
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        data = buf.getvalue()
        self.write_bytes(name, data)
        return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "rows": len(table)}

    def read_columns(self, name: str, columns: list[str]) -> dict[str, list]:
        data = self.read_bytes(name)
        return pq.read_table(io.BytesIO(data), columns=columns).to_pydict()

    def read_table(self, name: str, *, filters=None) -> list[dict]:
        data = self.read_bytes(name)
        return pq.read_table(io.BytesIO(data), filters=filters).to_pylist()


def _type(values: list) -> pa.DataType:
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool):
            return pa.bool_()
        if isinstance(v, int):
            return pa.int64()
        if isinstance(v, float):
            return pa.float64()
        return pa.string()
    return pa.string()


class _LocalFS:
    """The few filesystem calls the archive makes, for a plain folder (no fsspec needed)."""

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def open(self, path: str, mode: str):
        return open(path, mode)  # noqa: SIM115 - the caller closes it

    def makedirs(self, path: str, exist_ok: bool = True) -> None:
        os.makedirs(path, exist_ok=exist_ok)

    def mv(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def rm(self, path: str) -> None:
        os.remove(path)


def _filesystem(url: str) -> Any:
    if "://" not in url or url.startswith("file://"):
        return _LocalFS()
    try:
        import fsspec
    except ImportError as exc:  # optional: only a remote archive needs it
        raise ArchiveMissing(f"{url} needs fsspec, which is not installed") from exc
    return fsspec.core.url_to_fs(url)[0]


def local_path(url: str) -> str:
    return url[len("file://") :] if url.startswith("file://") else url
