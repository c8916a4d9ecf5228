// pgjdbc: connect over TLS with a password, batches of prepared inserts,
// every type read back, DatabaseMetaData, streaming with a fetch size,
// CopyManager, transactions. Run as `java -cp postgresql.jar PgJdbcTest.java`.
import java.io.StringReader;
import java.math.BigDecimal;
import java.sql.*;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.util.*;

import org.postgresql.PGConnection;

public class PgJdbcTest {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    static void checkEq(Object got, Object want, String what) {
        if (!Objects.equals(got, want)) throw new AssertionError(what + ": got " + got + ", want " + want);
    }

    static Connection connect() throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", System.getenv("FOAM_USER"));
        p.setProperty("password", System.getenv("FOAM_PASSWORD"));
        p.setProperty("sslmode", "verify-full");
        p.setProperty("sslrootcert", System.getenv("FOAM_SSLROOTCERT"));
        String url = "jdbc:postgresql://" + System.getenv("FOAM_HOST") + ":" + System.getenv("FOAM_PORT") + "/" + System.getenv("FOAM_DB");
        return DriverManager.getConnection(url, p);
    }

    static String table() {
        return "t_" + UUID.randomUUID().toString().replace("-", "").substring(0, 10);
    }

    static void typesAndBatches(Connection c) throws SQLException {
        String t = table();
        try (Statement s = c.createStatement()) {
            s.execute("CREATE TABLE " + t + " (id INT PRIMARY KEY, s SMALLINT, b BIGINT, n NUMERIC(12,2), d DOUBLE PRECISION,"
                + " f BOOLEAN, x TEXT, v VARCHAR(20), c CHAR(3), dt DATE, ts TIMESTAMP)");
        }
        String text = "tab\there, \"quotes\", back\\slash, ünïcødé 🦆";
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + t + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")) {
            for (int id = 1; id <= 300; id++) {
                ps.setInt(1, id);
                ps.setShort(2, (short) -32768);
                ps.setLong(3, Long.MIN_VALUE);
                ps.setBigDecimal(4, new BigDecimal("-1234567890.05"));
                ps.setDouble(5, 0.1);
                ps.setBoolean(6, id % 2 == 0);
                ps.setString(7, text);
                ps.setString(8, "varchar");
                ps.setString(9, "ab");
                ps.setObject(10, LocalDate.of(2024, 2, 29));
                ps.setObject(11, LocalDateTime.of(1999, 12, 31, 23, 59, 58, 123456000));
                ps.addBatch();
            }
            int[] counts = ps.executeBatch();
            checkEq(counts.length, 300, "batch size");
            for (int count : counts) checkEq(count, 1, "update count of a batched insert");
        }
        try (PreparedStatement ps = c.prepareStatement("SELECT * FROM " + t + " WHERE id = ?")) {
            ps.setInt(1, 2);
            try (ResultSet rs = ps.executeQuery()) {
                check(rs.next(), "a row");
                checkEq(rs.getInt("id"), 2, "id");
                checkEq(rs.getShort("s"), (short) -32768, "smallint");
                checkEq(rs.getLong("b"), Long.MIN_VALUE, "bigint");
                checkEq(rs.getBigDecimal("n"), new BigDecimal("-1234567890.05"), "numeric");
                checkEq(rs.getDouble("d"), 0.1, "double");
                checkEq(rs.getBoolean("f"), true, "boolean");
                checkEq(rs.getString("x"), text, "text");
                checkEq(rs.getString("v"), "varchar", "varchar");
                checkEq(rs.getString("c"), "ab ", "char(3)");
                checkEq(rs.getObject("dt", LocalDate.class), LocalDate.of(2024, 2, 29), "date");
                checkEq(rs.getObject("ts", LocalDateTime.class), LocalDateTime.of(1999, 12, 31, 23, 59, 58, 123456000), "timestamp");
                ResultSetMetaData md = rs.getMetaData();
                checkEq(md.getColumnTypeName(4), "numeric", "numeric's type name");
                checkEq(md.getColumnTypeName(11), "timestamp", "timestamp's type name");
                check(!rs.next(), "one row");
            }
        }
        DatabaseMetaData meta = c.getMetaData();
        try (ResultSet rs = meta.getColumns(null, "public", t, null)) {
            List<String> names = new ArrayList<>();
            while (rs.next()) {
                names.add(rs.getString("COLUMN_NAME") + " " + rs.getString("TYPE_NAME") + " " + rs.getInt("COLUMN_SIZE"));
            }
            checkEq(names.get(0), "id int4 10", "getColumns id");
            checkEq(names.get(7), "v varchar 20", "getColumns v");
            checkEq(names.size(), 11, "getColumns count");
        }
        try (ResultSet rs = meta.getTables(null, "public", t, new String[] {"TABLE"})) {
            check(rs.next(), "getTables finds the table");
        }
    }

    static void streamingAndCopy(Connection c) throws Exception {
        String t = table();
        try (Statement s = c.createStatement()) {
            s.execute("CREATE TABLE " + t + " (k BIGINT PRIMARY KEY, v TEXT)");
        }
        StringBuilder rows = new StringBuilder();
        for (int k = 1; k <= 30000; k++) rows.append(k).append(",v").append(k).append('\n');
        long copied = c.unwrap(PGConnection.class).getCopyAPI().copyIn("COPY " + t + " FROM STDIN (FORMAT csv)", new StringReader(rows.toString()));
        checkEq(copied, 30000L, "rows copied");
        c.setAutoCommit(false);
        try (Statement s = c.createStatement()) {
            s.setFetchSize(1000);
            try (ResultSet rs = s.executeQuery("SELECT k, v FROM " + t + " ORDER BY k")) {
                long seen = 0;
                while (rs.next()) {
                    seen++;
                    checkEq(rs.getLong(1), seen, "streamed key");
                }
                checkEq(seen, 30000L, "streamed rows");
            }
        }
        c.commit();
        try (Statement s = c.createStatement()) {
            s.executeUpdate("DELETE FROM " + t + " WHERE k > 10");
            c.rollback();
            try (ResultSet rs = s.executeQuery("SELECT count(*) FROM " + t)) {
                rs.next();
                checkEq(rs.getLong(1), 30000L, "rows after a rolled-back DELETE");
            }
        }
        c.setAutoCommit(true);
        try (Statement s = c.createStatement()) {
            s.executeQuery("SELECT missing FROM " + t);
            throw new AssertionError("no error for a missing column");
        } catch (SQLException e) {
            checkEq(e.getSQLState(), "42703", "SQLSTATE of a missing column");
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection c = connect()) {
            typesAndBatches(c);
            streamingAndCopy(c);
        }
        System.out.println("pgjdbc: all checks passed");
    }
}
