"""The knowledge store contract on PostgreSQL (schema: ``migrations/0001_knowledge.sql``).

Every statement is scoped by (tenant, user_id) and bounded by a timeout. Each write first bumps
the owner's row in ``knowledge_owners`` inside its transaction: that row lock serialises one
owner's writers (so the ``max_documents`` count cannot race) and gives readers the ``version``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import asyncpg

from knowledge.errors import KnowledgeUnavailable
from knowledge.store import (
    Document,
    DocumentInfo,
    KnowledgeSnapshot,
    NewChunk,
    StoredChunk,
    check_found,
    check_room,
    check_update,
    new_document_id,
)

_TIMEOUT = 10.0
_UNAVAILABLE = (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError, TimeoutError)

_INFO = """
SELECT d.id, d.name, length(d.body) AS chars, d.chunk_count, d.created_at, d.updated_at,
       coalesce(array(SELECT b.role_id FROM knowledge_bindings b
                      WHERE b.tenant = d.tenant AND b.user_id = d.user_id
                        AND b.document_id = d.id ORDER BY b.role_id), '{}') AS role_ids
FROM knowledge_documents d
"""


def _info(row: asyncpg.Record) -> DocumentInfo:
    return DocumentInfo(
        id=row["id"],
        name=row["name"],
        chars=row["chars"],
        chunks=row["chunk_count"],
        role_ids=tuple(row["role_ids"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


@contextlib.contextmanager
def _unavailable() -> Iterator[None]:
    """Maps the database's connection errors and timeouts to ``KnowledgeUnavailable``."""
    try:
        yield
    except _UNAVAILABLE as e:
        raise KnowledgeUnavailable(f"knowledge store unavailable: {type(e).__name__}") from e


async def _read_version(conn: Any, tenant: str, user: str) -> int:
    value = await conn.fetchval(
        "SELECT version FROM knowledge_owners WHERE tenant = $1 AND user_id = $2",
        tenant,
        user,
        timeout=_TIMEOUT,
    )
    return 0 if value is None else int(value)


async def _read_info(conn: Any, tenant: str, user: str, document_id: str) -> DocumentInfo | None:
    row = await conn.fetchrow(
        _INFO + "WHERE d.tenant = $1 AND d.user_id = $2 AND d.id = $3",
        tenant, user, document_id,
        timeout=_TIMEOUT,
    )  # fmt: skip
    return None if row is None else _info(row)


async def _insert_bindings(
    conn: Any, tenant: str, user: str, bindings: Iterable[tuple[str, str]]
) -> None:
    """Binds each (role id, document id) pair; pairs already bound stay as they are."""
    await conn.executemany(
        """INSERT INTO knowledge_bindings (tenant, user_id, role_id, document_id)
           VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING""",
        [(tenant, user, role_id, doc_id) for role_id, doc_id in bindings],
        timeout=_TIMEOUT,
    )


class PostgresKnowledgeStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def _bump(self, conn: Any, tenant: str, user: str) -> int:
        version: int = await conn.fetchval(
            """INSERT INTO knowledge_owners (tenant, user_id, version) VALUES ($1, $2, 1)
               ON CONFLICT (tenant, user_id)
               DO UPDATE SET version = knowledge_owners.version + 1
               RETURNING version""",
            tenant,
            user,
            timeout=_TIMEOUT,
        )
        return version

    async def _insert_chunks(
        self, conn: Any, tenant: str, user: str, doc_id: str, chunks: Sequence[NewChunk]
    ) -> None:
        await conn.executemany(
            """INSERT INTO knowledge_chunks (tenant, user_id, document_id, ordinal, body, embedding)
               VALUES ($1, $2, $3, $4, $5, $6)""",
            [(tenant, user, doc_id, i, c.text, c.embedding) for i, c in enumerate(chunks)],
            timeout=_TIMEOUT,
        )

    async def create(
        self,
        tenant: str,
        user: str,
        *,
        name: str,
        text: str,
        chunks: Sequence[NewChunk],
        role_ids: Sequence[str],
        max_documents: int,
        name_embedding: bytes | None = None,
    ) -> DocumentInfo:
        doc_id = new_document_id()
        with _unavailable():
            async with self.pool.acquire(timeout=_TIMEOUT) as conn, conn.transaction():
                await self._bump(conn, tenant, user)
                count = await conn.fetchval(
                    "SELECT count(*) FROM knowledge_documents WHERE tenant = $1 AND user_id = $2",
                    tenant,
                    user,
                    timeout=_TIMEOUT,
                )
                check_room(count, max_documents)
                await conn.execute(
                    """INSERT INTO knowledge_documents
                           (tenant, user_id, id, name, body, chunk_count, name_embedding)
                       VALUES ($1, $2, $3, $4, $5, $6, $7)""",
                    tenant, user, doc_id, name, text, len(chunks), name_embedding,
                    timeout=_TIMEOUT,
                )  # fmt: skip
                await self._insert_chunks(conn, tenant, user, doc_id, chunks)
                await _insert_bindings(
                    conn, tenant, user, ((role_id, doc_id) for role_id in dict.fromkeys(role_ids))
                )
                info = await _read_info(conn, tenant, user, doc_id)
        assert info is not None
        return info

    async def get(self, tenant: str, user: str, document_id: str) -> Document | None:
        row = await self._fetchrow(
            _INFO.replace("SELECT ", "SELECT d.body, ", 1)
            + "WHERE d.tenant = $1 AND d.user_id = $2 AND d.id = $3",
            tenant,
            user,
            document_id,
        )
        return None if row is None else Document(_info(row), row["body"])

    async def documents(self, tenant: str, user: str) -> list[DocumentInfo]:
        rows = await self._fetch(
            _INFO + "WHERE d.tenant = $1 AND d.user_id = $2 ORDER BY d.created_at, d.id",
            tenant,
            user,
        )
        return [_info(r) for r in rows]

    async def update(
        self,
        tenant: str,
        user: str,
        document_id: str,
        *,
        name: str | None = None,
        text: str | None = None,
        chunks: Sequence[NewChunk] | None = None,
        name_embedding: bytes | None = None,
    ) -> DocumentInfo | None:
        check_update(text, chunks)
        with _unavailable():
            async with self.pool.acquire(timeout=_TIMEOUT) as conn, conn.transaction():
                await self._bump(conn, tenant, user)
                status = await conn.execute(
                    """UPDATE knowledge_documents
                       SET name = coalesce($4, name), body = coalesce($5, body),
                           chunk_count = coalesce($6, chunk_count),
                           name_embedding = CASE WHEN $4::text IS NULL THEN name_embedding
                                                 ELSE $7::bytea END,
                           updated_at = clock_timestamp()
                       WHERE tenant = $1 AND user_id = $2 AND id = $3""",
                    tenant, user, document_id, name, text,
                    None if chunks is None else len(chunks), name_embedding,
                    timeout=_TIMEOUT,
                )  # fmt: skip
                if status != "UPDATE 1":
                    return None
                if chunks is not None:
                    await conn.execute(
                        """DELETE FROM knowledge_chunks
                           WHERE tenant = $1 AND user_id = $2 AND document_id = $3""",
                        tenant, user, document_id,
                        timeout=_TIMEOUT,
                    )  # fmt: skip
                    await self._insert_chunks(conn, tenant, user, document_id, chunks)
                return await _read_info(conn, tenant, user, document_id)

    async def delete(self, tenant: str, user: str, document_id: str) -> bool:
        with _unavailable():
            async with self.pool.acquire(timeout=_TIMEOUT) as conn, conn.transaction():
                await self._bump(conn, tenant, user)
                status = await conn.execute(
                    "DELETE FROM knowledge_documents"
                    " WHERE tenant = $1 AND user_id = $2 AND id = $3",
                    tenant,
                    user,
                    document_id,
                    timeout=_TIMEOUT,
                )
        return bool(status == "DELETE 1")

    async def role_documents(self, tenant: str, user: str, role_id: str) -> list[DocumentInfo]:
        rows = await self._fetch(
            _INFO
            + """WHERE d.tenant = $1 AND d.user_id = $2 AND EXISTS (
                    SELECT 1 FROM knowledge_bindings b WHERE b.tenant = d.tenant
                    AND b.user_id = d.user_id AND b.document_id = d.id AND b.role_id = $3)
                 ORDER BY d.created_at, d.id""",
            tenant,
            user,
            role_id,
        )
        return [_info(r) for r in rows]

    async def set_role_documents(
        self, tenant: str, user: str, role_id: str, document_ids: Sequence[str]
    ) -> list[DocumentInfo]:
        wanted = list(dict.fromkeys(document_ids))
        with _unavailable():
            async with self.pool.acquire(timeout=_TIMEOUT) as conn, conn.transaction():
                await self._bump(conn, tenant, user)
                found = await conn.fetch(
                    """SELECT id FROM knowledge_documents
                       WHERE tenant = $1 AND user_id = $2 AND id = any($3::text[])""",
                    tenant, user, wanted,
                    timeout=_TIMEOUT,
                )  # fmt: skip
                check_found(wanted, (r["id"] for r in found))
                await conn.execute(
                    """DELETE FROM knowledge_bindings
                       WHERE tenant = $1 AND user_id = $2 AND role_id = $3
                         AND NOT (document_id = any($4::text[]))""",
                    tenant, user, role_id, wanted,
                    timeout=_TIMEOUT,
                )  # fmt: skip
                await _insert_bindings(conn, tenant, user, ((role_id, d) for d in wanted))
        return await self.role_documents(tenant, user, role_id)

    async def version(self, tenant: str, user: str) -> int:
        with _unavailable():
            return await _read_version(self.pool, tenant, user)

    async def snapshot(self, tenant: str, user: str) -> KnowledgeSnapshot:
        with _unavailable():
            async with (
                self.pool.acquire(timeout=_TIMEOUT) as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                version = await _read_version(conn, tenant, user)
                docs = await conn.fetch(
                    _INFO.replace("SELECT ", "SELECT d.name_embedding, ", 1)
                    + "WHERE d.tenant = $1 AND d.user_id = $2", tenant, user,
                    timeout=_TIMEOUT,
                )  # fmt: skip
                chunks = await conn.fetch(
                    """SELECT document_id, ordinal, body, embedding FROM knowledge_chunks
                       WHERE tenant = $1 AND user_id = $2 ORDER BY document_id, ordinal""",
                    tenant, user,
                    timeout=_TIMEOUT,
                )  # fmt: skip
        return KnowledgeSnapshot(
            version,
            {r["id"]: _info(r) for r in docs},
            [
                StoredChunk(r["document_id"], r["ordinal"], r["body"], r["embedding"])
                for r in chunks
            ],
            {r["id"]: r["name_embedding"] for r in docs if r["name_embedding"] is not None},
        )

    async def _fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        with _unavailable():
            rows: list[asyncpg.Record] = await self.pool.fetch(sql, *args, timeout=_TIMEOUT)
        return rows

    async def _fetchrow(self, sql: str, *args: object) -> asyncpg.Record | None:
        with _unavailable():
            row: asyncpg.Record | None = await self.pool.fetchrow(sql, *args, timeout=_TIMEOUT)
        return row
