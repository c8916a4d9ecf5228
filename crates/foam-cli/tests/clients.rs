//! The client compatibility suite: the drivers and tools people point at a
//! PostgreSQL database, each run against a real 3-node cluster over TLS
//! (`sslmode=verify-full` with the node's CA) with the superuser's
//! password (ADBC's Flight SQL driver on the node's Flight SQL port, with
//! the same password and CA). Each driver's own test lives in `tests/clients/<language>/`
//! and does its ordinary work: connect, create, insert with parameters,
//! read every type back exactly, transactions, bulk load, stream a large
//! result, read errors' SQLSTATEs. `tests/clients/setup.sh` installs the
//! drivers where missing (PyPI, npm, the Go proxy, Maven Central); psql
//! and pgbench are PostgreSQL 15's. docs/clients.md is the table
//! these tests keep true.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

use common::Cluster;

/// Nodes in each test's cluster: enough that rows cross the network.
const NODES: usize = 3;

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients")
}

/// Installs the drivers once per test binary.
fn setup() {
    static SETUP: Once = Once::new();
    SETUP.call_once(|| {
        let output = Command::new(clients_dir().join("setup.sh")).output().expect("run tests/clients/setup.sh");
        assert!(output.status.success(), "tests/clients/setup.sh failed:\n{}", text(&output));
    });
}

fn text(output: &Output) -> String {
    format!("--- stdout ---\n{}\n--- stderr ---\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A command run against node 0 of `cluster`, told where and how to
/// connect through `FOAM_*` (and libpq's `PG*`) variables.
fn client_command(cluster: &Cluster, program: &str, dir: &Path) -> Command {
    let node = &cluster.nodes[0];
    let password = cluster.password().expect("a cluster with passwords");
    let ca = node.data_dir.join("tls").join("ca.crt");
    let mut command = Command::new(program);
    command
        .current_dir(dir)
        .env("FOAM_HOST", &node.sql_host)
        .env("FOAM_PORT", node.sql_port.to_string())
        .env("FOAM_USER", "foam")
        .env("FOAM_PASSWORD", &password)
        .env("FOAM_DB", "foam")
        .env("FOAM_SSLROOTCERT", &ca)
        .env("FOAM_FLIGHT_SQL_PORT", node.flight_sql_port.to_string())
        .env("PGHOST", &node.sql_host)
        .env("PGPORT", node.sql_port.to_string())
        .env("PGUSER", "foam")
        .env("PGPASSWORD", &password)
        .env("PGDATABASE", "foam")
        .env("PGSSLMODE", "verify-full")
        .env("PGSSLROOTCERT", &ca)
        .env("PGCONNECT_TIMEOUT", "10");
    command
}

/// Runs `program args` in `tests/clients/<dir>` and fails the test with its
/// output unless it succeeds.
fn run(cluster: &Cluster, dir: &str, program: &str, args: &[&str]) -> String {
    let output = client_command(cluster, program, &clients_dir().join(dir)).args(args).output().unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(output.status.success(), "{program} {} failed:\n{}", args.join(" "), text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// psql with `sql` on its standard input, stopping at the first error.
fn psql(cluster: &Cluster, args: &[&str], sql: &str) -> Output {
    use std::io::Write;
    let mut child = client_command(cluster, "psql", &clients_dir())
        .args(["-X", "-v", "ON_ERROR_STOP=1"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run psql");
    child.stdin.take().expect("psql's stdin").write_all(sql.as_bytes()).expect("write to psql");
    child.wait_with_output().expect("psql")
}

fn psql_ok(cluster: &Cluster, args: &[&str], sql: &str) -> String {
    let output = psql(cluster, args, sql);
    assert!(output.status.success(), "psql failed on:\n{sql}\n{}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn python_drivers_psycopg2_psycopg3_asyncpg_sqlalchemy_pandas_adbc_flightsql() {
    setup();
    let cluster = Cluster::start(NODES);
    let out = run(&cluster, "python", "python3", &["-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short"]);
    assert!(out.contains(" passed"), "{out}");
}

#[test]
fn node_postgres() {
    setup();
    let cluster = Cluster::start(NODES);
    let out = run(&cluster, "node", "node", &["--test", "pg.test.js"]);
    assert!(out.contains("# fail 0"), "{out}");
}

#[test]
fn go_pgx() {
    setup();
    let cluster = Cluster::start(NODES);
    let out = run(&cluster, "go", "go", &["test", "-count=1", "-v", "./..."]);
    assert!(out.contains("--- PASS: TestTypesRoundTrip") && !out.contains("--- FAIL"), "{out}");
}

#[test]
fn java_pgjdbc() {
    setup();
    let cluster = Cluster::start(NODES);
    let version = std::fs::read_to_string(clients_dir().join("java/PGJDBC_VERSION")).expect("java/PGJDBC_VERSION");
    let jar = format!("lib/postgresql-{}.jar", version.trim());
    let out = run(&cluster, "java", "java", &["-cp", &jar, "PgJdbcTest.java"]);
    assert!(out.contains("pgjdbc: all checks passed"), "{out}");
}

#[test]
fn psql_describes_tables_views_roles_and_schemas() {
    let cluster = Cluster::start(NODES);
    psql_ok(
        &cluster,
        &[],
        "CREATE TABLE described (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, price NUMERIC(12,2), code CHAR(3), added DATE);\n\
         CREATE VIEW described_view AS SELECT id, name FROM described;\n\
         INSERT INTO described VALUES (1, 'one', 1.50, 'ab', '2024-02-29');\n",
    );
    let d = psql_ok(&cluster, &[], "\\d described\n");
    for line in ["character varying(20)", "numeric(12,2)", "character(3)", "not null", "\"described_pkey\" PRIMARY KEY, btree (id)"] {
        assert!(d.contains(line), "\\d described lacks {line:?}:\n{d}");
    }
    // \d+ unnests the (NULL) options columns, read as no options.
    let d_plus = psql_ok(&cluster, &[], "\\d+ described\n");
    for line in ["Storage", "extended", "\"described_pkey\" PRIMARY KEY, btree (id)"] {
        assert!(d_plus.contains(line), "\\d+ described lacks {line:?}:\n{d_plus}");
    }
    // \dt+ sizes a table by the bytes of its copies that serve reads.
    let dt_plus = psql_ok(&cluster, &["-At"], "\\dt+ described\n");
    let size = psql_ok(&cluster, &["-At"], "SELECT pg_size_pretty(sum(bytes)::bigint) FROM foam_partitions WHERE table_name = 'described' AND serves_reads;\n");
    assert!(dt_plus.starts_with("public|described|table|") && dt_plus.contains(&format!("|{}|", size.trim())), "{dt_plus} sized {size}");
    // \df reads a function's result and argument types from pg_proc.
    let df = psql_ok(&cluster, &["-At"], "\\dfS abs\n");
    assert!(df.contains("pg_catalog|abs|double precision|double precision|func"), "{df}");
    let dt = psql_ok(&cluster, &[], "\\dt\n\\dv\n");
    assert!(dt.contains("described ") && dt.contains("described_view"), "{dt}");
    let du = psql_ok(&cluster, &[], "\\du\n");
    assert!(du.contains("foam") && du.contains("Superuser"), "{du}");
    let l = psql_ok(&cluster, &[], "\\l\n\\dn\n");
    assert!(l.contains(" foam ") && l.contains(" public "), "{l}");
    // char(3) comes back padded, in the aligned format and in CSV.
    let csv = psql_ok(&cluster, &["--csv"], "SELECT code, code || '|' AS joined FROM described;\n");
    assert_eq!(csv, "code,joined\nab ,ab|\n");
    // A view's CHAR column too; PREPARE and DEALLOCATE answer with their
    // command tags, as psql prints them (not an empty result).
    let through_view = psql_ok(&cluster, &["--csv"], "CREATE VIEW coded AS SELECT code FROM described WHERE code = 'ab  ';\nSELECT code FROM coded;\n");
    assert_eq!(through_view, "CREATE VIEW\ncode\nab \n");
    let tags = psql_ok(&cluster, &[], "PREPARE by_code AS SELECT id FROM described WHERE code = $1;\nDEALLOCATE by_code;\n");
    assert_eq!(tags, "PREPARE\nDEALLOCATE\n");
    // \copy sends a local file through COPY FROM STDIN.
    let file = cluster.dir.path().join("rows.csv");
    std::fs::write(&file, "2,two,2.25,xyz,2024-03-01\n3,three,,,\n").unwrap();
    psql_ok(&cluster, &[], &format!("\\copy described FROM '{}' WITH (FORMAT csv)\n", file.display()));
    let counted = psql_ok(&cluster, &["-At"], "SELECT count(*), sum(price) FROM described;\n");
    assert_eq!(counted, "3|3.75\n");
    // NOTICEs and WARNINGs reach psql as PostgreSQL 15 words them.
    let noticed = psql(
        &cluster,
        &[],
        "DROP TABLE IF EXISTS never_made;\nCREATE TABLE IF NOT EXISTS described (id INT);\nDROP SEQUENCE IF EXISTS never_seq;\nCOMMIT;\nBEGIN;\nBEGIN;\nROLLBACK;\n",
    );
    let said = String::from_utf8_lossy(&noticed.stderr);
    for line in [
        "NOTICE:  table \"never_made\" does not exist, skipping",
        "NOTICE:  relation \"described\" already exists, skipping",
        "NOTICE:  sequence \"never_seq\" does not exist, skipping",
        "WARNING:  there is no transaction in progress",
        "WARNING:  there is already a transaction in progress",
    ] {
        assert!(said.contains(line), "psql's stderr lacks {line:?}:\n{said}");
    }
    assert!(noticed.status.success(), "{}", text(&noticed));
}

#[test]
fn pgbench_initializes_and_runs_tpcb() {
    let cluster = Cluster::start(NODES);
    let init = client_command(&cluster, "pgbench", &clients_dir()).args(["-i", "-s", "1", "-q"]).output().expect("pgbench -i");
    assert!(init.status.success(), "pgbench -i failed:\n{}", text(&init));
    // Without row locks, FoamDB fails a conflicting update with 40001 where
    // PostgreSQL waits (every transaction updates the one branch at scale
    // 1): pgbench runs such a transaction again, as its --max-tries allows.
    let bench = client_command(&cluster, "pgbench", &clients_dir()).args(["-c", "2", "-t", "25", "-n", "--max-tries=200"]).output().expect("pgbench");
    assert!(bench.status.success(), "pgbench failed:\n{}", text(&bench));
    let report = String::from_utf8_lossy(&bench.stdout);
    assert!(report.contains("number of transactions actually processed: 50/50"), "{report}");
    // Every TPC-B transaction adds its delta to one account, teller and
    // branch and logs it once: the sums agree.
    let sums = psql_ok(
        &cluster,
        &["-At"],
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(delta) FROM pgbench_history), \
         (SELECT sum(bbalance) FROM pgbench_branches) = (SELECT sum(delta) FROM pgbench_history), \
         (SELECT count(*) FROM pgbench_history);\n",
    );
    assert_eq!(sums, "t|t|50\n");
}

// pg_dump 15 of schema and data: sequences, a SERIAL and identity columns,
// defaults and rows, restored by psql into the same cluster to what was
// dumped: the same rows, the same sequence states, the same dump again.
#[test]
fn pg_dump_with_data_restores_rows_sequences_and_identity_columns() {
    let cluster = Cluster::start(NODES);
    psql_ok(
        &cluster,
        &[],
        "CREATE TABLE dumped_serial (id SERIAL PRIMARY KEY, v TEXT DEFAULT 'x', n INT GENERATED BY DEFAULT AS IDENTITY, \
         b BIGINT GENERATED ALWAYS AS IDENTITY (START 10 INCREMENT 5), added DATE DEFAULT '2024-01-01') DISTRIBUTED BY (id);\n\
         CREATE SEQUENCE free_seq START 5 INCREMENT 2;\n\
         INSERT INTO dumped_serial (v) SELECT 'r' || value FROM generate_series(1, 50);\n\
         INSERT INTO dumped_serial (v, n) VALUES (NULL, 1000);\n\
         SELECT nextval('free_seq');\n",
    );
    let state = |cluster: &Cluster| {
        psql_ok(
            cluster,
            &["-Atq"],
            "SELECT * FROM dumped_serial ORDER BY id;\n\
             SELECT last_value, is_called FROM dumped_serial_id_seq;\n\
             SELECT last_value, is_called FROM dumped_serial_n_seq;\n\
             SELECT last_value, is_called FROM dumped_serial_b_seq;\n\
             SELECT last_value, is_called FROM free_seq;\n",
        )
    };
    let before = state(&cluster);
    let dump_lines = |cluster: &Cluster| {
        let dump = client_command(cluster, "pg_dump", &clients_dir()).arg("--no-privileges").output().expect("pg_dump");
        assert!(dump.status.success(), "pg_dump failed:\n{}", text(&dump));
        String::from_utf8_lossy(&dump.stdout).into_owned()
    };
    let dump = dump_lines(&cluster);
    for line in [
        "CREATE SEQUENCE public.free_seq\n    START WITH 5\n    INCREMENT BY 2",
        "CREATE SEQUENCE public.dumped_serial_id_seq\n    AS integer",
        "ALTER SEQUENCE public.dumped_serial_id_seq OWNED BY public.dumped_serial.id;",
        "ALTER TABLE public.dumped_serial ALTER COLUMN b ADD GENERATED ALWAYS AS IDENTITY (",
        "    SEQUENCE NAME public.dumped_serial_b_seq",
        "ALTER TABLE public.dumped_serial ALTER COLUMN n ADD GENERATED BY DEFAULT AS IDENTITY (",
        "ALTER TABLE ONLY public.dumped_serial ALTER COLUMN id SET DEFAULT nextval('dumped_serial_id_seq'::regclass);",
        "COPY public.dumped_serial (id, v, n, b, added) FROM stdin;",
        "SELECT pg_catalog.setval('public.free_seq', 5, true);",
    ] {
        assert!(dump.contains(line), "the dump lacks {line:?}:\n{dump}");
    }
    // As one transaction (`psql -1`) the restore fails at the PRIMARY KEY
    // (FoamDB does not add a key in a block) and rolls back: nothing of
    // it stays, sequences and their ALTERs included.
    psql_ok(&cluster, &[], "DROP TABLE dumped_serial;\nDROP SEQUENCE free_seq;\n");
    let failed = psql(&cluster, &["-q", "-1"], &dump);
    assert!(!failed.status.success() && String::from_utf8_lossy(&failed.stderr).contains("ALTER TABLE cannot run inside a transaction block"), "{}", text(&failed));
    let left = psql_ok(&cluster, &["-Atq"], "SELECT count(*) FROM pg_class WHERE relname LIKE 'dumped_serial%' OR relname = 'free_seq';\n");
    assert_eq!(left, "0\n", "a rolled-back restore left relations behind");
    psql_ok(&cluster, &["-q"], &dump);
    assert_eq!(state(&cluster), before, "the restored cluster differs from the dumped one");
    // Dumped again, the same statements and rows (rows in any order).
    let sorted = |dump: &str| {
        let mut lines: Vec<&str> = dump.lines().filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict")).collect();
        lines.sort_unstable();
        lines.join("\n")
    };
    assert_eq!(sorted(&dump_lines(&cluster)), sorted(&dump), "a dump of the restored cluster differs");
    // The restored sequences go on where the dumped ones were.
    let next = psql_ok(&cluster, &["-Atq"], "INSERT INTO dumped_serial (v) VALUES ('after') RETURNING id > 51, b > 255;\nSELECT nextval('free_seq');\n");
    assert_eq!(next, "t|t\n7\n", "{next}");
    let refused = psql(&cluster, &[], "INSERT INTO dumped_serial (b) VALUES (1);\n");
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && message.contains("cannot insert a non-DEFAULT value into column \"b\""), "{}", text(&refused));
}

// pg_dump 15: the schema of tables (declared types, NOT NULL, keys, CHECK
// constraints) and views, restored by psql into the same cluster.
#[test]
fn pg_dump_schema_only_recreates_the_tables_and_views() {
    let cluster = Cluster::start(NODES);
    psql_ok(
        &cluster,
        &[],
        "CREATE TABLE dumped (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, price NUMERIC(12,2) CHECK (price >= 0), code CHAR(3), added DATE, \
         ok BOOLEAN, big BIGINT, f DOUBLE PRECISION, note TEXT) DISTRIBUTED BY (id);\n\
         CREATE TABLE dumped_pair (a INT, b TEXT, UNIQUE (a)) DISTRIBUTED BY (a);\n\
         CREATE VIEW dumped_view AS SELECT id, name FROM dumped WHERE ok;\n\
         INSERT INTO dumped VALUES (1, 'one', 1.50, 'ab', '2024-02-29', true, 5, 0.5, 'n');\n",
    );
    let dump = client_command(&cluster, "pg_dump", &clients_dir()).args(["--schema-only", "--no-privileges"]).output().expect("pg_dump");
    assert!(dump.status.success(), "pg_dump failed:\n{}", text(&dump));
    let schema = String::from_utf8_lossy(&dump.stdout).into_owned();
    for line in [
        "CREATE TABLE public.dumped (",
        "    id integer NOT NULL,",
        "    name character varying(20) NOT NULL,",
        "    price numeric(12,2),",
        "    code character(3),",
        "    CONSTRAINT dumped_price_check CHECK ((price >= 0))",
        "    big bigint,",
        "    f double precision,",
        "CREATE TABLE public.dumped_pair (",
        "CREATE VIEW public.dumped_view AS",
        "ALTER TABLE public.dumped OWNER TO foam;",
        "ADD CONSTRAINT dumped_pkey PRIMARY KEY (id);",
        "ADD CONSTRAINT dumped_pair_a_key UNIQUE (a);",
    ] {
        assert!(schema.contains(line), "the dump lacks {line:?}:\n{schema}");
    }
    // The dump re-creates what it describes, statement by statement.
    psql_ok(&cluster, &[], "DROP VIEW dumped_view;\nDROP TABLE dumped, dumped_pair;\n");
    psql_ok(&cluster, &[], &schema);
    let d = psql_ok(&cluster, &[], "\\d dumped\n");
    for line in [
        "character varying(20)",
        "numeric(12,2)",
        "character(3)",
        "not null",
        "\"dumped_pkey\" PRIMARY KEY, btree (id)",
        "\"dumped_price_check\" CHECK ((price >= 0))",
    ] {
        assert!(d.contains(line), "\\d dumped after the restore lacks {line:?}:\n{d}");
    }
    let rows = psql_ok(
        &cluster,
        &["-Atq"],
        "INSERT INTO dumped VALUES (2, 'two', 2.25, 'xyz', '2024-03-01', true, 6, 1.5, NULL), (3, 'three', NULL, NULL, NULL, false, NULL, NULL, NULL);\n\
         SELECT id, name FROM dumped_view ORDER BY id;\n",
    );
    assert_eq!(rows, "2|two\n", "{rows}");
    // The restored key is enforced.
    let duplicate = psql(&cluster, &[], "INSERT INTO dumped VALUES (2, 'again', NULL, NULL, NULL, NULL, NULL, NULL, NULL);\n");
    assert!(!duplicate.status.success() && String::from_utf8_lossy(&duplicate.stderr).contains("duplicate key"), "{}", text(&duplicate));
    // And so is the restored CHECK.
    let negative = psql(&cluster, &[], "INSERT INTO dumped VALUES (4, 'four', -1, NULL, NULL, NULL, NULL, NULL, NULL);\n");
    let refused = String::from_utf8_lossy(&negative.stderr).contains("violates check constraint \"dumped_price_check\"");
    assert!(!negative.status.success() && refused, "{}", text(&negative));
}
