"""asyncpg: binary results and parameters, executemany, binary COPY
(copy_records_to_table), cursors in a transaction."""

import asyncio
import ssl

import asyncpg

from conftest import settings
from values import COLUMNS, NULL_ROW, ROW, ROW_READ


async def connect():
    s = settings()
    context = ssl.create_default_context(cafile=s["sslrootcert"])
    return await asyncpg.connect(
        host=s["host"], port=s["port"], user=s["user"], password=s["password"], database=s["dbname"], ssl=context
    )


def run(coroutine):
    return asyncio.run(coroutine)


def test_types_round_trip(table):
    async def body():
        conn = await connect()
        await conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
        placeholders = ", ".join(f"${i + 1}" for i in range(len(ROW)))
        await conn.executemany(f"INSERT INTO {table} VALUES ({placeholders})", [ROW, NULL_ROW])
        rows = await conn.fetch(f"SELECT * FROM {table} ORDER BY id")
        assert [tuple(r) for r in rows] == [ROW_READ, NULL_ROW]
        assert await conn.fetchval("SELECT $1::int + 0", 5) == 5
        await conn.close()

    run(body())


def test_binary_copy_and_cursor(table):
    async def body():
        conn = await connect()
        await conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
        records = [(k,) + ROW[1:] for k in range(1, 1001)] + [NULL_ROW[:0] + (0,) + NULL_ROW[1:]]
        await conn.copy_records_to_table(table, records=records)
        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 1001
        rows = await conn.fetch(f"SELECT * FROM {table} WHERE id IN (0, 7) ORDER BY id")
        assert [tuple(r) for r in rows] == [(0,) + NULL_ROW[1:], (7,) + ROW_READ[1:]]
        async with conn.transaction():
            seen = 0
            async for record in conn.cursor(f"SELECT id FROM {table} ORDER BY id", prefetch=100):
                assert record["id"] == seen
                seen += 1
            assert seen == 1001
        await conn.close()

    run(body())
