// node-postgres: connect over TLS with a password, parameters, every type
// read back, transactions, errors with their SQLSTATE.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const crypto = require('node:crypto');
const { Client } = require('pg');

function client() {
  return new Client({
    host: process.env.FOAM_HOST,
    port: Number(process.env.FOAM_PORT),
    user: process.env.FOAM_USER,
    password: process.env.FOAM_PASSWORD,
    database: process.env.FOAM_DB,
    ssl: { ca: fs.readFileSync(process.env.FOAM_SSLROOTCERT), servername: process.env.FOAM_HOST },
  });
}

const table = () => 't_' + crypto.randomBytes(5).toString('hex');

test('types round trip', async () => {
  const c = client();
  await c.connect();
  const t = table();
  await c.query(`CREATE TABLE ${t} (id INT PRIMARY KEY, i INT, b BIGINT, n NUMERIC(12,2), d DOUBLE PRECISION,
    f BOOLEAN, s TEXT, v VARCHAR(20), c CHAR(3), dt DATE, ts TIMESTAMP)`);
  const text = 'tab\there, "quotes", back\\slash, ünïcødé 🦆';
  await c.query(`INSERT INTO ${t} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [1, -2147483648, '9223372036854775807', '-1234567890.05', 0.1, true, text, 'varchar', 'ab', '2024-02-29', '1999-12-31 23:59:58.123']);
  await c.query(`INSERT INTO ${t} (id) VALUES ($1)`, [2]);
  const { rows } = await c.query({ text: `SELECT * FROM ${t} ORDER BY id`, rowMode: 'array', types: { getTypeParser: () => (v) => v } });
  assert.deepStrictEqual(rows, [
    ['1', '-2147483648', '9223372036854775807', '-1234567890.05', '0.1', 't', text, 'varchar', 'ab ', '2024-02-29', '1999-12-31 23:59:58.123'],
    ['2', null, null, null, null, null, null, null, null, null, null],
  ]);
  const typed = await c.query(`SELECT i, d, f FROM ${t} WHERE id = $1`, [1]);
  assert.deepStrictEqual(typed.rows, [{ i: -2147483648, d: 0.1, f: true }]);
  assert.deepStrictEqual((await c.query('SELECT $1::text AS x', ['y'])).rows, [{ x: 'y' }]);
  await c.end();
});

test('transactions and errors', async () => {
  const c = client();
  await c.connect();
  const t = table();
  await c.query(`CREATE TABLE ${t} (k INT PRIMARY KEY, v TEXT)`);
  await c.query('BEGIN');
  await c.query(`INSERT INTO ${t} VALUES (1, 'a')`);
  await c.query('COMMIT');
  await c.query('BEGIN');
  await c.query(`INSERT INTO ${t} VALUES (2, 'b')`);
  await c.query('ROLLBACK');
  await assert.rejects(c.query(`INSERT INTO ${t} VALUES (1, 'again')`), (e) => e.code === '23505');
  await assert.rejects(c.query(`SELECT nope FROM ${t}`), (e) => e.code === '42703');
  const updated = await c.query(`UPDATE ${t} SET v = $1 WHERE k = $2`, ['z', 1]);
  assert.strictEqual(updated.rowCount, 1);
  assert.deepStrictEqual((await c.query(`SELECT k, v FROM ${t}`)).rows, [{ k: 1, v: 'z' }]);
  await c.end();
});
