// pgx v5: connect over TLS with a password, typed parameters, every type
// read back, binary COPY (CopyFrom), batches, transactions.
package clienttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	url := fmt.Sprintf("postgres://%s:%s@%s:%s/%s?sslmode=verify-full&sslrootcert=%s",
		os.Getenv("FOAM_USER"), os.Getenv("FOAM_PASSWORD"), os.Getenv("FOAM_HOST"),
		os.Getenv("FOAM_PORT"), os.Getenv("FOAM_DB"), os.Getenv("FOAM_SSLROOTCERT"))
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func tableName() string {
	b := make([]byte, 5)
	rand.Read(b)
	return "t_" + hex.EncodeToString(b)
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	tag, err := conn.Exec(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag
}

const columns = "id INT PRIMARY KEY, s SMALLINT, b BIGINT, n NUMERIC(12,2), d DOUBLE PRECISION, f BOOLEAN, t TEXT, c CHAR(3), dt DATE, ts TIMESTAMP"

func row(id int32) []any {
	return []any{id, int16(-32768), int64(-9223372036854775808), pgtype.Numeric{Int: bigInt(-123456789005), Exp: -2, Valid: true},
		1.5e300, true, "tab\there, \"quotes\", ünïcødé 🦆", "ab", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 58, 123456000, time.UTC)}
}

func readAll(t *testing.T, conn *pgx.Conn, sql string, args ...any) [][]any {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	var out [][]any
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, values)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func check(t *testing.T, got [][]any, id int32) {
	t.Helper()
	want := row(id)
	want[7] = "ab "
	if len(got) != 1 {
		t.Fatalf("got %d rows", len(got))
	}
	for i, value := range got[0] {
		if n, ok := value.(pgtype.Numeric); ok {
			w := want[i].(pgtype.Numeric)
			if n.Int.Cmp(w.Int) != 0 || n.Exp != w.Exp {
				t.Errorf("column %d: %v, want %v", i, n, w)
			}
			continue
		}
		if !reflect.DeepEqual(value, want[i]) {
			t.Errorf("column %d: %#v, want %#v", i, value, want[i])
		}
	}
}

func TestTypesRoundTrip(t *testing.T) {
	conn := connect(t)
	table := tableName()
	exec(t, conn, "CREATE TABLE "+table+" ("+columns+")")
	exec(t, conn, "INSERT INTO "+table+" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)", row(1)...)
	check(t, readAll(t, conn, "SELECT * FROM "+table+" WHERE id = $1", 1), 1)
	var sum int32
	if err := conn.QueryRow(context.Background(), "SELECT $1::int + 1", int32(41)).Scan(&sum); err != nil || sum != 42 {
		t.Fatalf("$1::int + 1: %v %v", sum, err)
	}
}

func TestCopyFromAndBatch(t *testing.T) {
	conn := connect(t)
	table := tableName()
	exec(t, conn, "CREATE TABLE "+table+" ("+columns+")")
	var rows [][]any
	for id := int32(1); id <= 5000; id++ {
		rows = append(rows, row(id))
	}
	names := []string{"id", "s", "b", "n", "d", "f", "t", "c", "dt", "ts"}
	copied, err := conn.CopyFrom(context.Background(), pgx.Identifier{table}, names, pgx.CopyFromRows(rows))
	if err != nil || copied != 5000 {
		t.Fatalf("CopyFrom: %d %v", copied, err)
	}
	check(t, readAll(t, conn, "SELECT * FROM "+table+" WHERE id = 4321"), 4321)
	batch := &pgx.Batch{}
	batch.Queue("UPDATE "+table+" SET t = $1 WHERE id = $2", "first", int32(1))
	batch.Queue("DELETE FROM "+table+" WHERE id > $1", int32(4000))
	results := conn.SendBatch(context.Background(), batch)
	for _, want := range []int64{1, 1000} {
		tag, err := results.Exec()
		if err != nil || tag.RowsAffected() != want {
			t.Fatalf("batch: %v %v, want %d", tag, err, want)
		}
	}
	results.Close()
	got := readAll(t, conn, "SELECT count(*), min(t) FROM "+table)
	if got[0][0] != int64(4000) || got[0][1] != "first" {
		t.Fatalf("after batch: %v", got)
	}
}

func TestTransaction(t *testing.T) {
	conn := connect(t)
	table := tableName()
	exec(t, conn, "CREATE TABLE "+table+" (k INT PRIMARY KEY, v INT)")
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1, 1)")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (2, 2)"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1, 3)")
		return err
	})
	var pgErr *pgconn.PgError
	if !asPgError(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("duplicate key in a transaction: %v", err)
	}
	got := readAll(t, conn, "SELECT k, v FROM "+table)
	if len(got) != 1 || got[0][0] != int32(1) {
		t.Fatalf("after rollback: %v", got)
	}
}
