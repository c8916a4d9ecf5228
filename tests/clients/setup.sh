#!/usr/bin/env bash
# Installs the drivers the client compatibility suite (crates/foam-cli/tests/clients.rs)
# runs, where they are missing: Python packages from PyPI (ADBC's Flight SQL driver among them), node-postgres from npm,
# pgx from the Go module proxy and pgjdbc from Maven Central. Quick when all are there.
set -euo pipefail
cd "$(dirname "$0")"
if ! python3 -c "import psycopg, psycopg2, asyncpg, sqlalchemy, pandas, pytest, pyarrow, adbc_driver_flightsql" 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check -r python/requirements.txt
fi
if [ ! -d node/node_modules/pg ]; then
    (cd node && npm install --no-audit --no-fund --silent)
fi
(cd go && go mod download)
jar="java/lib/postgresql-$(cat java/PGJDBC_VERSION).jar"
if [ ! -f "$jar" ]; then
    mvn --quiet dependency:copy -Dartifact="org.postgresql:postgresql:$(cat java/PGJDBC_VERSION)" -DoutputDirectory=java/lib
fi
