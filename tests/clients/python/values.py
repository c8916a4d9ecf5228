"""The table every client test creates, and the row of every type it writes
and must read back exactly (the same values as the other languages' tests)."""

import datetime
from decimal import Decimal

COLUMNS = (
    "id INT PRIMARY KEY, s SMALLINT, i INT, b BIGINT, n NUMERIC(12,2), d DOUBLE PRECISION, "
    "r REAL, f BOOLEAN, t TEXT, v VARCHAR(20), c CHAR(3), dt DATE, ts TIMESTAMP"
)

# One row of extremes and awkward text; a second row of NULLs (but the key).
ROW = (
    1,
    -32768,
    2147483647,
    -9223372036854775808,
    Decimal("-1234567890.05"),
    1.7976931348623157e308,
    0.25,
    True,
    "tab\there, \"quotes\", back\\slash, newline\nand ünïcødé 🦆",
    "varchar",
    "ab",
    datetime.date(2024, 2, 29),
    datetime.datetime(1999, 12, 31, 23, 59, 58, 123456),
)
NULL_ROW = (2,) + (None,) * (len(ROW) - 1)

# What reading ROW back gives: char(3) is blank-padded, as in PostgreSQL.
ROW_READ = ROW[:10] + ("ab ",) + ROW[11:]
