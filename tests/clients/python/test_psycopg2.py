"""psycopg2: connect over TLS with a password, create, insert with
parameters, read every type back, transactions, COPY, a named cursor."""

import io

import psycopg2
import psycopg2.errors
import pytest

from values import COLUMNS, NULL_ROW, ROW, ROW_READ


def connect(conninfo):
    conn = psycopg2.connect(conninfo)
    return conn


def test_types_round_trip(conninfo, table):
    conn = connect(conninfo)
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} ({COLUMNS})")
    with conn, conn.cursor() as cur:
        placeholders = ", ".join(["%s"] * len(ROW))
        cur.executemany(f"INSERT INTO {table} VALUES ({placeholders})", [ROW, NULL_ROW])
    with conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        assert cur.fetchall() == [ROW_READ, NULL_ROW]
        assert [d.name for d in cur.description][:3] == ["id", "s", "i"]
        cur.execute(f"SELECT * FROM {table} WHERE t = %s AND n = %s AND dt = %s", (ROW[8], ROW[4], ROW[11]))
        assert cur.fetchall() == [ROW_READ]
    conn.close()


def test_transaction_rolls_back(conninfo, table):
    conn = connect(conninfo)
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (k INT PRIMARY KEY, v TEXT)")
    cur = conn.cursor()
    cur.execute(f"INSERT INTO {table} VALUES (1, 'kept')")
    conn.commit()
    cur.execute(f"INSERT INTO {table} VALUES (2, 'dropped')")
    conn.rollback()
    with pytest.raises(psycopg2.errors.UniqueViolation):
        cur.execute(f"INSERT INTO {table} VALUES (1, 'duplicate')")
    conn.rollback()
    cur.execute(f"UPDATE {table} SET v = %s WHERE k = %s", ("changed", 1))
    assert cur.rowcount == 1
    conn.commit()
    cur.execute(f"SELECT k, v FROM {table}")
    assert cur.fetchall() == [(1, "changed")]
    conn.close()


def test_copy_and_named_cursor(conninfo, table):
    conn = connect(conninfo)
    with conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (k INT PRIMARY KEY, v TEXT, f BOOLEAN)")
        rows = "".join(f"{k}\tv{k}\t{'t' if k % 2 else 'f'}\n" for k in range(20000))
        cur.copy_expert(f"COPY {table} FROM STDIN", io.StringIO(rows))
        assert cur.rowcount == 20000
    with conn, conn.cursor() as cur:
        out = io.StringIO()
        cur.copy_expert(f"COPY (SELECT k, v, f FROM {table} WHERE k < 3 ORDER BY k) TO STDOUT WITH (FORMAT csv)", out)
        assert out.getvalue() == "0,v0,f\n1,v1,t\n2,v2,f\n"
    # A named cursor streams the result in batches (DECLARE ... FETCH).
    with conn:
        with conn.cursor(name="big") as cur:
            cur.itersize = 1000
            cur.execute(f"SELECT k, v FROM {table} ORDER BY k")
            seen = 0
            for k, v in cur:
                assert (k, v) == (seen, f"v{seen}")
                seen += 1
            assert seen == 20000
    conn.close()


def test_errors_carry_sqlstate(conninfo, table):
    conn = connect(conninfo)
    conn.autocommit = True
    cur = conn.cursor()
    with pytest.raises(psycopg2.errors.UndefinedTable):
        cur.execute(f"SELECT * FROM {table}_missing")
    with pytest.raises(psycopg2.errors.SyntaxError):
        cur.execute("SELEC 1")
    cur.execute("SELECT 1")
    assert cur.fetchone() == (1,)
    conn.close()
