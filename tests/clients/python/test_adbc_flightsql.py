"""ADBC's Flight SQL driver (and pandas through it) against FoamDB's Arrow
Flight SQL port: log in with the same user and password as on the SQL
port, create, insert with bound parameters, read every type back as Arrow,
stream a large result, list tables, and read errors' SQLSTATEs."""

import datetime
import decimal
import os
import socket

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import settings


def flight_connect(tls=True, password=None, autocommit=True):
    s = settings()
    port = os.environ["FOAM_FLIGHT_SQL_PORT"]
    kwargs = {"username": s["user"], "password": s["password"] if password is None else password}
    if tls:
        with open(s["sslrootcert"]) as ca:
            kwargs["adbc.flight.sql.client_option.tls_root_certs"] = ca.read()
        uri = f"grpc+tls://{s['host']}:{port}"
    else:
        uri = f"grpc://{s['host']}:{port}"
    return flightsql.connect(uri, db_kwargs=kwargs, autocommit=autocommit)


ROWS = [
    (1, 10_000_000_000, "plain", "ünïcödé ✓", decimal.Decimal("1234567890.25"), 0.5, True, datetime.date(2024, 2, 29), datetime.datetime(2024, 3, 1, 12, 30, 45, 123456)),
    (2, -5, "", "x", decimal.Decimal("-0.01"), -1e300, False, datetime.date(1970, 1, 1), datetime.datetime(1999, 12, 31, 23, 59, 59)),
    (3, None, None, None, None, None, None, None, None),
]


def create(cur, table):
    cur.execute(
        f"CREATE TABLE {table} (id INT PRIMARY KEY, big BIGINT, t TEXT, v VARCHAR(20), n NUMERIC(12,2), "
        f"f DOUBLE PRECISION, b BOOLEAN, d DATE, ts TIMESTAMP) DISTRIBUTED BY (id)"
    )


def test_types_round_trip_as_arrow_over_tls(table):
    with flight_connect() as conn, conn.cursor() as cur:
        create(cur, table)
        cur.executemany(f"INSERT INTO {table} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)", ROWS)
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        result = cur.fetch_arrow_table()
        assert result.column_names == ["id", "big", "t", "v", "n", "f", "b", "d", "ts"]
        assert pa.types.is_int32(result.schema.field("id").type)
        assert pa.types.is_decimal(result.schema.field("n").type)
        assert pa.types.is_date32(result.schema.field("d").type)
        got = [tuple(row.values()) for row in result.to_pylist()]
        assert got == ROWS
        # The same rows, one parameter bound to a query.
        cur.execute(f"SELECT t FROM {table} WHERE id = $1", (2,))
        assert cur.fetchall() == [("",)]


def test_plain_tcp_from_this_machine_and_a_large_result_streams(table):
    with flight_connect(tls=False) as conn, conn.cursor() as cur:
        cur.execute("SELECT value % 1000 AS k, value FROM generate_series(1, 1000000) ORDER BY value")
        reader = cur.fetch_record_batch()
        rows, total, batches = 0, 0, 0
        for batch in reader:
            rows += batch.num_rows
            total += pc.sum(batch.column("value")).as_py() or 0
            batches += 1
        assert rows == 1_000_000
        assert total == 1_000_000 * 1_000_001 // 2
        assert batches > 1


def test_several_parameter_rows_apply_all_or_none(table):
    with flight_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, name TEXT) DISTRIBUTED BY (id)")
        cur.executemany(f"INSERT INTO {table} VALUES ($1, $2)", [(1, "a"), (2, "b")])
        with pytest.raises(adbc_driver_manager.Error) as failed:
            cur.executemany(f"INSERT INTO {table} VALUES ($1, $2)", [(3, "c"), (1, "again")])
        assert "23505" in str(failed.value)
        cur.execute(f"SELECT id, name FROM {table} ORDER BY id")
        assert cur.fetchall() == [(1, "a"), (2, "b")]
        # The session goes on after the failure.
        cur.execute(f"UPDATE {table} SET name = 'B' WHERE id = 2")
        cur.execute(f"SELECT name FROM {table} WHERE id = 2")
        assert cur.fetchall() == [("B",)]


def test_commit_and_rollback_without_autocommit(table):
    with flight_connect() as setup, setup.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, name TEXT) DISTRIBUTED BY (id)")
    with flight_connect(autocommit=False) as conn, conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} VALUES ($1, $2)", (1, "kept"))
        conn.commit()
        cur.execute(f"INSERT INTO {table} VALUES ($1, $2)", (2, "undone"))
        cur.execute(f"SELECT count(*) FROM {table}")
        assert cur.fetchall() == [(2,)]
        conn.rollback()
    with flight_connect() as other, other.cursor() as cur:
        cur.execute(f"SELECT id, name FROM {table} ORDER BY id")
        assert cur.fetchall() == [(1, "kept")]


def test_errors_carry_their_sqlstate():
    with flight_connect() as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error) as missing:
            cur.execute("SELECT * FROM no_such_table_anywhere")
        assert "42P01" in str(missing.value) and "no_such_table_anywhere" in str(missing.value)
        with pytest.raises(adbc_driver_manager.Error) as syntax:
            cur.execute("SELEC 1")
        assert "42601" in str(syntax.value)
        with pytest.raises(adbc_driver_manager.Error) as text:
            cur.execute("SELECT $1::int + 1", ("not a number",))
        assert "22P02" in str(text.value)
        cur.execute("SELECT 1 AS one")
        assert cur.fetchall() == [(1,)]


def test_garbage_on_the_port_closes_only_its_connection():
    s = settings()
    port = int(os.environ["FOAM_FLIGHT_SQL_PORT"])
    payloads = [
        os.urandom(4096),  # neither TLS nor HTTP/2
        b"\x16\x03\x01" + os.urandom(200),  # a broken TLS record
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(300),  # a broken HTTP/2 stream
    ]
    for payload in payloads:
        with socket.create_connection((s["host"], port), timeout=10) as sock:
            sock.sendall(payload)
            try:
                while sock.recv(4096):
                    pass
            except (ConnectionResetError, socket.timeout):
                pass
    with flight_connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 7 AS still_serving")
        assert cur.fetchall() == [(7,)]


def test_a_wrong_password_is_refused():
    with pytest.raises(adbc_driver_manager.Error) as refused:
        with flight_connect(password="not-the-password") as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
    assert "28P01" in str(refused.value)


def test_tables_and_schemas_are_listed(table):
    with flight_connect() as conn, conn.cursor() as cur:
        create(cur, table)
        cur.execute(f"CREATE VIEW {table}_v AS SELECT id, t FROM {table}")
        schema = conn.adbc_get_table_schema(table)
        assert schema.names == ["id", "big", "t", "v", "n", "f", "b", "d", "ts"]
        objects = conn.adbc_get_objects(depth="tables", table_name_filter=f"{table}%").read_all().to_pylist()
        assert [c["catalog_name"] for c in objects] == ["foam"]
        names = {t["table_name"]: t["table_type"] for s in objects[0]["catalog_db_schemas"] for t in s["db_schema_tables"]}
        assert names == {table: "TABLE", f"{table}_v": "VIEW"}
        cur.execute(f"DROP VIEW {table}_v")


def test_pandas_reads_through_adbc(table):
    with flight_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (k INT, v DOUBLE PRECISION) DISTRIBUTED BY (k)")
        cur.execute(f"INSERT INTO {table} SELECT value % 7, value * 0.5 FROM generate_series(1, 700)")
        frame = pd.read_sql(f"SELECT k, count(*) AS n, sum(v) AS s FROM {table} GROUP BY k ORDER BY k", conn)
        assert list(frame.columns) == ["k", "n", "s"]
        assert frame["n"].tolist() == [100] * 7
        assert frame["s"].sum() == pytest.approx(sum(i * 0.5 for i in range(1, 701)))
