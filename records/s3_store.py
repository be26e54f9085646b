"""Recordings' sealed pieces in S3-compatible object storage (SPEC REC-2), through boto3.

Rules
-----
1. The same contract as ``records.audio_store`` (one suite tests both): a recording is the
   objects under ``<prefix><recording id>/``, one per piece, named like the local store's files
   (``000003.<key id>``). Pieces are sealed before they get here: the bucket never holds
   plaintext audio, whatever its own encryption.
2. ``put`` writes the piece, then removes an older object of the same number under another key
   id (a piece is replaced after a key rotation); a reader listing in between may see both and
   takes the newest by its modification time, like the local store takes the one file it
   finds.
3. ``delete`` lists and removes every object of the recording (in batches of 1000, the S3
   limit) and says whether any was there; a crash part-way leaves fewer objects, and the next
   ``delete`` finishes (the expiry calls it again: ``records.expiry``).
4. boto3 is blocking: every call runs in a worker thread. Credentials come from boto3's own
   chain (environment, shared files, instance roles), never from OpenRealtime's settings, so
   no secret passes through them. boto3 is an optional dependency (``pip install
   openrealtime[s3]``); choosing this store without it fails at start with that advice.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from typing import Any

from memory.crypto import Sealed
from records.audio_store import check_recording_id

_PIECE = re.compile(r"(\d{6})\.([A-Za-z0-9_-]{1,32})")
_BATCH = 1000


class S3Unavailable(RuntimeError):
    """The S3 store was chosen but cannot be used (boto3 missing, no bucket)."""


def s3_client(*, endpoint_url: str | None, region: str | None) -> Any:
    """A boto3 S3 client (Rule 4)."""
    try:
        boto3 = importlib.import_module("boto3")
    except ImportError:
        raise S3Unavailable(
            "OPENREALTIME_RECORDING_STORE=s3 needs boto3: pip install 'openrealtime[s3]'"
        ) from None
    return boto3.client("s3", endpoint_url=endpoint_url or None, region_name=region or None)


class S3AudioStore:
    """Rules 1–4."""

    def __init__(self, client: Any, bucket: str, *, prefix: str = "recordings/") -> None:
        if not bucket:
            raise S3Unavailable("OPENREALTIME_RECORDING_S3_BUCKET is empty")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def _folder(self, recording_id: str) -> str:
        return f"{self.prefix}{check_recording_id(recording_id)}/"

    def _objects(self, recording_id: str) -> list[dict[str, Any]]:
        folder, found, token = self._folder(recording_id), [], None
        while True:
            page = self.client.list_objects_v2(
                Bucket=self.bucket,
                Prefix=folder,
                **({"ContinuationToken": token} if token else {}),
            )
            found.extend(page.get("Contents", []))
            if not page.get("IsTruncated"):
                return found
            token = page["NextContinuationToken"]

    async def put(self, recording_id: str, index: int, sealed: Sealed) -> None:
        await asyncio.to_thread(self._put, recording_id, index, sealed)

    def _put(self, recording_id: str, index: int, sealed: Sealed) -> None:
        folder = self._folder(recording_id)
        name = f"{index:06d}.{sealed.key_id}"
        self.client.put_object(Bucket=self.bucket, Key=folder + name, Body=sealed.blob)
        for obj in self._objects(recording_id):
            other = obj["Key"][len(folder) :]
            if other.startswith(f"{index:06d}.") and other != name:
                self.client.delete_object(Bucket=self.bucket, Key=obj["Key"])

    async def read(self, recording_id: str) -> list[tuple[int, Sealed]]:
        return await asyncio.to_thread(self._read, recording_id)

    def _read(self, recording_id: str) -> list[tuple[int, Sealed]]:
        folder = self._folder(recording_id)
        newest: dict[int, dict[str, Any]] = {}
        for obj in self._objects(recording_id):
            if _PIECE.fullmatch(obj["Key"][len(folder) :]) is None:
                continue
            index = int(obj["Key"][len(folder) : len(folder) + 6])
            if index not in newest or obj["LastModified"] > newest[index]["LastModified"]:
                newest[index] = obj
        pieces = []
        for index in sorted(newest):
            key = newest[index]["Key"]
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            pieces.append((index, Sealed(key.rsplit(".", 1)[1], bytes(body))))
        return pieces

    async def delete(self, recording_id: str) -> bool:
        return await asyncio.to_thread(self._delete, recording_id)

    def _delete(self, recording_id: str) -> bool:
        objects = self._objects(recording_id)
        for start in range(0, len(objects), _BATCH):
            batch = [{"Key": obj["Key"]} for obj in objects[start : start + _BATCH]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return bool(objects)
