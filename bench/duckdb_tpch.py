"""Run the 22 TPC-H queries with DuckDB; print timings and answers as JSON.

This is the DuckDB side of `foam bench tpch --compare`: the Rust benchmark
writes the generated TPC-H tables as Parquet, then runs

    python3 bench/duckdb_tpch.py --parquet-dir DIR [--storage native] \
        --queries-dir crates/foam-tpch/queries --repeat R --threads T

and reads one JSON document from stdout:

    {"engine": "duckdb", "version": "...", "threads": T, "storage": "parquet",
     "load_ms": null, "queries": [{"query": 1, "ms": [12.3, ...], "rows": 4,
     "answer": [["A", "F", "37734107.00", ...], ...]}, ...]}

`--storage parquet` (the default) queries views over the Parquet files;
`--storage native` first copies every table into DuckDB's own storage (a
database file in a temporary directory; `load_ms` is that copy's time) and
queries those tables, as a user who picked DuckDB would.

Each query runs once untimed (warm-up, whose rows are the "answer", every
value as text, NULL as "NULL"), then R timed runs, every one reported. A
query that fails gets "ms": [], "rows": null and an "error" string; the JSON
is printed anyway and the exit status is then 1.

`--answers-out DIR` also writes each answer as DIR/q<N>.out in the TPC-H
kit's answer format (a header line, then the rows with fields separated by
`|`): crates/foam-tpch/answers/ holds such a set, which FoamDB's CI test
compares with.

Tables are read from DIR/<table>/*.parquet, or from DIR/<table>.parquet when
there is no such sub-directory. The query files are the ones FoamDB runs
(DataFusion's PostgreSQL dialect); DuckDB accepts all 22 unchanged, so
REWRITES below is empty. Install with: pip install -r bench/requirements.txt
"""

import argparse
import datetime
import decimal
import json
import os
import sys
import tempfile
import time

import duckdb

TABLES = ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"]

# Minimal per-query textual rewrites {query number: [(old, new), ...]} for SQL
# that DuckDB does not accept as written. None are needed with duckdb 2.0.0:
# `date '...' - interval '90 days'`, `extract(year from ...)`,
# `substring(x from 1 for 2)` and the correlated subqueries all run as is.
REWRITES: dict[int, list[tuple[str, str]]] = {}


def table_source(parquet_dir: str, table: str) -> str:
    sub = os.path.join(parquet_dir, table)
    if os.path.isdir(sub):
        path = os.path.join(sub, "*.parquet")
    elif os.path.isfile(sub + ".parquet"):
        path = sub + ".parquet"
    else:
        sys.exit(f"no Parquet files for table {table} in {parquet_dir}")
    return "read_parquet('{}')".format(os.path.abspath(path).replace("'", "''"))


def load_query(queries_dir: str, number: int) -> str:
    with open(os.path.join(queries_dir, f"q{number:02}.sql")) as f:
        sql = f.read().strip().rstrip(";")
    for old, new in REWRITES.get(number, []):
        assert old in sql, f"rewrite for q{number:02} no longer applies: {old!r}"
        sql = sql.replace(old, new)
    return sql


def as_text(value) -> str:
    """One answer value as text: decimals in full, never in exponent form."""
    if value is None:
        return "NULL"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return str(value)


def write_answer(directory: str, number: int, columns: list[str], rows: list[list[str]]) -> None:
    for row in rows:
        assert not any("|" in value or "\n" in value for value in row), f"q{number}: a value holds | or a newline"
    with open(os.path.join(directory, f"q{number}.out"), "w") as f:
        f.write("|".join(columns) + "\n")
        for row in rows:
            f.write("|".join(row) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parquet-dir", required=True)
    parser.add_argument("--queries-dir", required=True)
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per query, after one warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--storage", choices=["parquet", "native"], default="parquet",
                        help="query the Parquet files, or tables in DuckDB's own storage")
    parser.add_argument("--answers-out", help="also write each answer as DIR/q<N>.out")
    args = parser.parse_args()

    scratch = tempfile.TemporaryDirectory(prefix="duckdb-tpch-")
    load_ms = None
    if args.storage == "native":
        con = duckdb.connect(os.path.join(scratch.name, "tpch.duckdb"), config={"threads": args.threads})
        started = time.perf_counter()
        for table in TABLES:
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM {table_source(args.parquet_dir, table)}")
        con.execute("CHECKPOINT")
        load_ms = round((time.perf_counter() - started) * 1000, 3)
    else:
        con = duckdb.connect(config={"threads": args.threads})
        for table in TABLES:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM {table_source(args.parquet_dir, table)}")
    if args.answers_out:
        os.makedirs(args.answers_out, exist_ok=True)

    results, failed = [], False
    for number in range(1, 23):
        sql = load_query(args.queries_dir, number)
        try:
            cursor = con.execute(sql)  # warm-up, and the answer
            answer = [[as_text(value) for value in row] for row in cursor.fetchall()]
            if args.answers_out:
                write_answer(args.answers_out, number, [d[0] for d in cursor.description], answer)
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                con.execute(sql).fetchall()
                times.append(round((time.perf_counter() - started) * 1000, 3))
            results.append({"query": number, "ms": times, "rows": len(answer), "answer": answer})
        except duckdb.Error as e:
            failed = True
            print(f"q{number:02} failed: {e}", file=sys.stderr)
            results.append({"query": number, "ms": [], "rows": None, "error": str(e)})

    json.dump({"engine": "duckdb", "version": duckdb.__version__, "threads": args.threads,
               "storage": args.storage, "load_ms": load_ms, "queries": results}, sys.stdout, indent=1)
    print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
