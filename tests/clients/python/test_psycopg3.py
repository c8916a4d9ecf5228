"""psycopg 3: text and binary results, prepared statements, COPY with
write_row, a server-side cursor, transactions as context managers."""

import psycopg
import pytest

from values import COLUMNS, NULL_ROW, ROW, ROW_READ


def test_types_round_trip_text_and_binary(conninfo, table):
    with psycopg.connect(conninfo) as conn:
        conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
        placeholders = ", ".join(["%s"] * len(ROW))
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES ({placeholders})", [ROW, NULL_ROW])
        conn.commit()
        for binary in (False, True):
            with conn.cursor(binary=binary) as cur:
                cur.execute(f"SELECT * FROM {table} ORDER BY id")
                assert cur.fetchall() == [ROW_READ, NULL_ROW], f"binary={binary}"
        # prepare=True: a named prepared statement, executed again.
        for _ in range(3):
            got = conn.execute(f"SELECT v FROM {table} WHERE id = %s", (1,), prepare=True).fetchall()
            assert got == [("varchar",)]
        assert conn.execute("SELECT %s::int + 1", (41,)).fetchone() == (42,)


def test_copy_write_row_and_read(conninfo, table):
    with psycopg.connect(conninfo) as conn:
        conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
        conn.commit()
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} FROM STDIN") as copy:
                copy.write_row(ROW)
                copy.write_row(NULL_ROW)
            conn.commit()
            assert cur.execute(f"SELECT * FROM {table} ORDER BY id").fetchall() == [ROW_READ, NULL_ROW]
            with cur.copy(f"COPY (SELECT id, f, t FROM {table} ORDER BY id) TO STDOUT") as copy:
                rows = list(copy.rows())
            assert rows == [("1", "t", ROW[8]), ("2", None, None)]


def test_server_cursor_streams(conninfo, table):
    with psycopg.connect(conninfo) as conn:
        conn.execute(f"CREATE TABLE {table} (k BIGINT PRIMARY KEY, v TEXT)")
        conn.execute(f"INSERT INTO {table} SELECT value, 'v' || value FROM generate_series(1, 50000)")
        conn.commit()
        with conn.cursor(name="stream") as cur:
            cur.itersize = 2000
            cur.execute(f"SELECT k, v FROM {table} ORDER BY k")
            total = 0
            for k, v in cur:
                total += 1
                assert v == f"v{k}" and k == total
            assert total == 50000


def test_transaction_blocks(conninfo, table):
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (k INT PRIMARY KEY, v INT)")
        with conn.transaction():
            conn.execute(f"INSERT INTO {table} VALUES (1, 1)")
        with pytest.raises(RuntimeError):
            with conn.transaction():
                conn.execute(f"INSERT INTO {table} VALUES (2, 2)")
                raise RuntimeError("abandon")
        with pytest.raises(psycopg.errors.UniqueViolation):
            with conn.transaction():
                conn.execute(f"INSERT INTO {table} VALUES (3, 3)")
                conn.execute(f"INSERT INTO {table} VALUES (1, 9)")
        assert conn.execute(f"SELECT k, v FROM {table}").fetchall() == [(1, 1)]
        assert conn.execute("SELECT to_regtype('integer'), to_regtype('no_such_type')").fetchone() == (23, None)
        conn.execute("DEALLOCATE ALL")


def test_returning_rows_names_and_tags(conninfo, table):
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (k INT PRIMARY KEY, v INT, note TEXT)")
        # Extended protocol: Describe gives the returned columns' names and types.
        cur = conn.execute(f"INSERT INTO {table} VALUES (%s, %s, %s), (%s, %s, %s) RETURNING k, v * 2, upper(note) AS shout",
                           (1, 10, "one", 2, 20, "two"), prepare=True)
        assert [d.name for d in cur.description] == ["k", "?column?", "shout"]
        assert sorted(cur.fetchall()) == [(1, 20, "ONE"), (2, 40, "TWO")]
        assert (cur.statusmessage, cur.rowcount) == ("INSERT 0 2", 2)
        cur = conn.execute(f"UPDATE {table} SET v = v + %s WHERE k = %s RETURNING *", (5, 2))
        assert cur.fetchall() == [(2, 25, "two")] and cur.statusmessage == "UPDATE 1"
        cur = conn.execute(f"DELETE FROM {table} WHERE k = 1 RETURNING note")
        assert cur.fetchall() == [("one",)] and cur.statusmessage == "DELETE 1"
        cur = conn.execute(f"INSERT INTO {table} VALUES (2, 0, 'x'), (3, 30, 'three') ON CONFLICT (k) DO NOTHING RETURNING k")
        assert cur.fetchall() == [(3,)] and cur.statusmessage == "INSERT 0 1"
        # An error in RETURNING: nothing is written.
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute(f"UPDATE {table} SET v = 0 RETURNING 1 / v")
        assert conn.execute(f"SELECT k, v FROM {table} ORDER BY k").fetchall() == [(2, 25), (3, 30)]
        with conn.cursor(binary=True) as binary:
            binary.execute(f"UPDATE {table} SET note = %s WHERE k = 3 RETURNING k, note", ("bin",))
            assert binary.fetchall() == [(3, "bin")]


def test_timestamptz_in_the_session_time_zone(conninfo, table):
    """timestamptz values are instants: written with any offset (text,
    binary, COPY), read back as the same instant in the session's zone;
    SET TIME ZONE is reported to the driver (ParameterStatus)."""
    from datetime import datetime, timedelta, timezone
    from zoneinfo import ZoneInfo

    instant = datetime(2024, 3, 10, 6, 30, 15, 250000, tzinfo=timezone.utc)
    with psycopg.connect(conninfo) as conn:
        assert conn.info.parameter_status("TimeZone") == "Etc/UTC"
        conn.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, at TIMESTAMPTZ)")
        tokyo = instant.astimezone(timezone(timedelta(hours=9)))
        conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (1, tokyo))
        with conn.cursor() as cur:
            with cur.copy(f"COPY {table} FROM STDIN") as copy:
                copy.write_row((2, instant.astimezone(timezone(timedelta(hours=-3)))))
        conn.commit()
        conn.execute("SET TIME ZONE 'America/New_York'")
        assert conn.info.parameter_status("TimeZone") == "America/New_York"
        for binary in (False, True):
            with conn.cursor(binary=binary) as cur:
                rows = cur.execute(f"SELECT id, at, at::text FROM {table} ORDER BY id").fetchall()
            assert [r[1] for r in rows] == [instant, instant], f"binary={binary}"
            # Shown in the session's zone: 01:30 in New York (EST, before DST).
            assert rows[0][2] == "2024-03-10 01:30:15.25-05", f"binary={binary}"
            assert rows[0][1].astimezone(ZoneInfo("America/New_York")).hour == 1
        # A value without a zone is New York's local time.
        got = conn.execute("SELECT extract(epoch FROM '2024-03-10 01:30:15.25'::timestamptz)").fetchone()[0]
        assert abs(float(got) - instant.timestamp()) < 1e-3
