"""Run the 22 TPC-H queries with DuckDB over Parquet files; print timings as JSON.

This is the DuckDB side of `foam bench tpch --compare`: the Rust benchmark
writes the generated TPC-H tables as Parquet, then runs

    python3 bench/duckdb_tpch.py --parquet-dir DIR \
        --queries-dir crates/foam-tpch/queries --repeat R --threads T

and reads one JSON document from stdout:

    {"engine": "duckdb", "version": "...", "threads": T,
     "queries": [{"query": 1, "ms": [12.3, ...], "rows": 4}, ...]}

Each query runs once untimed (warm-up), then R timed runs, every one reported.
A query that fails gets "ms": [], "rows": null and an "error" string; the
JSON is printed anyway and the exit status is then 1.

Tables are read from DIR/<table>/*.parquet, or from DIR/<table>.parquet when
there is no such sub-directory. The query files are the ones FoamDB runs
(DataFusion's PostgreSQL dialect); DuckDB accepts all 22 unchanged, so
REWRITES below is empty. Install with: pip install -r bench/requirements.txt
"""

import argparse
import json
import os
import sys
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parquet-dir", required=True)
    parser.add_argument("--queries-dir", required=True)
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per query, after one warm-up")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    con = duckdb.connect(config={"threads": args.threads})
    for table in TABLES:
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM {table_source(args.parquet_dir, table)}")

    results, failed = [], False
    for number in range(1, 23):
        sql = load_query(args.queries_dir, number)
        try:
            rows = len(con.execute(sql).fetchall())  # warm-up
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                rows = len(con.execute(sql).fetchall())
                times.append(round((time.perf_counter() - started) * 1000, 3))
            results.append({"query": number, "ms": times, "rows": rows})
        except duckdb.Error as e:
            failed = True
            print(f"q{number:02} failed: {e}", file=sys.stderr)
            results.append({"query": number, "ms": [], "rows": None, "error": str(e)})

    json.dump({"engine": "duckdb", "version": duckdb.__version__, "threads": args.threads,
               "queries": results}, sys.stdout, indent=1)
    print()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
