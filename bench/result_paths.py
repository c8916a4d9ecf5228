"""Times one large result fetched from FoamDB four ways, side by side in one
run: Arrow Flight SQL (ADBC, to an Arrow table), the PostgreSQL protocol
(psycopg 3 rows in text and in binary format, and COPY ... TO STDOUT in
binary), and the same query on PostgreSQL 15 through psycopg for scale.

    python3 bench/result_paths.py --rows 10000000 \\
        --foam 'host=127.0.0.1 port=5433 user=foam password=...' --flight grpc://127.0.0.1:8433 \\
        --postgres 'host=/tmp port=5499 user=postgres dbname=postgres'

Prints a Markdown table of seconds (best of --repeat) and rows per second;
ratios are against Flight SQL. Needs psycopg, adbc-driver-flightsql and
pyarrow (tests/clients/python/requirements.txt)."""

import argparse
import time

import adbc_driver_flightsql.dbapi as flightsql
import psycopg


def query(rows):
    # Four columns of the types results usually carry.
    return (
        f"SELECT value AS id, value * 0.5 AS amount, 'name ' || (value % 1000) AS label, "
        f"value % 7 = 0 AS flag FROM generate_series(1, {rows})"
    )


def postgres_query(rows):
    return (
        f"SELECT value AS id, value * 0.5 AS amount, 'name ' || (value % 1000) AS label, "
        f"value % 7 = 0 AS flag FROM generate_series(1, {rows}) AS value"
    )


def best(repeat, run):
    times, counted = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        counted = run()
        times.append(time.perf_counter() - started)
    return min(times), counted


def flight(uri, user, password, sql):
    def run():
        with flightsql.connect(uri, db_kwargs={"username": user, "password": password}) as conn, conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetch_arrow_table().num_rows

    return run


def pg_rows(conninfo, sql, binary):
    def run():
        with psycopg.connect(conninfo) as conn, conn.cursor(binary=binary) as cur:
            cur.execute(sql)
            return len(cur.fetchall())

    return run


def pg_copy(conninfo, sql):
    def run():
        with psycopg.connect(conninfo) as conn, conn.cursor() as cur:
            size = 0
            with cur.copy(f"COPY ({sql}) TO STDOUT (FORMAT binary)") as copy:
                for block in copy:
                    size += len(block)
            return size

    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--foam", required=True, help="libpq conninfo of a FoamDB node")
    parser.add_argument("--flight", required=True, help="grpc:// URI of the same node's Flight SQL port")
    parser.add_argument("--postgres", help="libpq conninfo of PostgreSQL, for scale")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    info = psycopg.conninfo.conninfo_to_dict(args.foam)
    paths = [
        ("FoamDB, Arrow Flight SQL (ADBC, Arrow table)", flight(args.flight, info["user"], info["password"], query(args.rows))),
        ("FoamDB, PostgreSQL protocol, text rows (psycopg)", pg_rows(args.foam, query(args.rows), False)),
        ("FoamDB, PostgreSQL protocol, binary rows (psycopg)", pg_rows(args.foam, query(args.rows), True)),
        ("FoamDB, COPY (query) TO STDOUT binary (bytes only)", pg_copy(args.foam, query(args.rows))),
    ]
    if args.postgres:
        paths.append(("PostgreSQL 15, text rows (psycopg)", pg_rows(args.postgres, postgres_query(args.rows), False)))
    results = []
    for name, run in paths:
        seconds, counted = best(args.repeat, run)
        results.append((name, seconds, counted))
        print(f"{name}: {seconds:.2f} s ({counted})", flush=True)
    base = results[0][1]
    print()
    print(f"| path ({args.rows:,} rows, best of {args.repeat}) | seconds | rows/s | × Flight SQL |")
    print("|---|---|---|---|")
    for name, seconds, _ in results:
        print(f"| {name} | {seconds:.2f} | {args.rows / seconds:,.0f} | {seconds / base:.1f} |")


if __name__ == "__main__":
    main()
