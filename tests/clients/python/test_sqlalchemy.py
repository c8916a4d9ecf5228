"""SQLAlchemy 2 (psycopg2 and psycopg dialects) and pandas: connect,
create_all/drop_all in a transaction, ORM inserts, queries, updates and
rollback, table reflection, to_sql and read_sql."""

import datetime
from decimal import Decimal

import pandas
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conftest import settings


def url(driver):
    s = settings()
    return sa.engine.URL.create(
        f"postgresql+{driver}",
        username=s["user"],
        password=s["password"],
        host=s["host"],
        port=s["port"],
        database=s["dbname"],
        query={"sslmode": "verify-full", "sslrootcert": s["sslrootcert"]},
    )


@pytest.mark.parametrize("driver", ["psycopg2", "psycopg"])
def test_orm_and_reflection(driver, table):
    class Base(DeclarativeBase):
        pass

    class Item(Base):
        __tablename__ = table
        id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=False)
        name: Mapped[str] = mapped_column(sa.String(20), nullable=False)
        price: Mapped[Decimal] = mapped_column(sa.Numeric(12, 2))
        added: Mapped[datetime.date] = mapped_column(sa.Date)

    engine = sa.create_engine(url(driver))
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add_all([Item(id=i, name=f"item {i}", price=Decimal(i) / 4, added=datetime.date(2024, 1, i)) for i in range(1, 6)])
        session.commit()
    with Session(engine) as session:
        item = session.get(Item, 3)
        assert (item.name, item.price, item.added) == ("item 3", Decimal("0.75"), datetime.date(2024, 1, 3))
        item.name = "renamed"
        session.commit()
        names = session.scalars(sa.select(Item.name).where(Item.price > Decimal("0.5")).order_by(Item.id)).all()
        assert names == ["renamed", "item 4", "item 5"]
        session.delete(session.get(Item, 5))
        session.rollback()
        assert session.scalar(sa.select(sa.func.count()).select_from(Item)) == 5

    inspector = sa.inspect(engine)
    assert table in inspector.get_table_names() and inspector.has_table(table)
    assert table not in inspector.get_view_names()
    # Reflection reads the catalog as PostgreSQL's: columns with types,
    # nullability and defaults, the primary key, indexes and constraints.
    columns = {c["name"]: c for c in inspector.get_columns(table)}
    assert list(columns) == ["id", "name", "price", "added"]
    assert isinstance(columns["name"]["type"], sa.VARCHAR) and columns["name"]["type"].length == 20
    assert (columns["price"]["type"].precision, columns["price"]["type"].scale) == (12, 2)
    # Mapped[...] without Optional is NOT NULL in SQLAlchemy 2.
    assert [c["nullable"] for c in columns.values()] == [False] * 4
    assert inspector.get_pk_constraint(table)["constrained_columns"] == ["id"]
    assert inspector.get_unique_constraints(table) == [] and inspector.get_indexes(table) == []
    # psycopg 3 binds current_setting's argument as a parameter.
    reflected = sa.Table(table, sa.MetaData(), autoload_with=engine)
    assert [c.name for c in reflected.primary_key] == ["id"]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(reflected)).scalar() == 5
    Base.metadata.drop_all(engine)
    assert table not in sa.inspect(engine).get_table_names()
    engine.dispose()


def test_pandas_to_sql_and_read_sql(table):
    engine = sa.create_engine(url("psycopg2"))
    frame = pandas.DataFrame(
        {
            "k": range(1000),
            "x": [k / 8 for k in range(1000)],
            "s": [f"s{k}" for k in range(1000)],
            "when": pandas.date_range("2024-01-01", periods=1000, freq="h"),
        }
    )
    frame.to_sql(table, engine, index=False, chunksize=250)
    back = pandas.read_sql(f"SELECT * FROM {table} ORDER BY k", engine)
    pandas.testing.assert_frame_equal(back, frame, check_dtype=False)
    chunks = list(pandas.read_sql(f"SELECT k FROM {table} ORDER BY k", engine, chunksize=300))
    assert [len(c) for c in chunks] == [300, 300, 300, 100]
    # read_sql_table reflects the table first.
    whole = pandas.read_sql_table(table, engine).sort_values("k", ignore_index=True)
    pandas.testing.assert_frame_equal(whole, frame, check_dtype=False)
    engine.dispose()


def test_reflection_of_keys_and_time_zones(table):
    engine = sa.create_engine(url("psycopg"))
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE {table} (id INT GENERATED ALWAYS AS IDENTITY (START WITH 10), "
            f"code TEXT NOT NULL, at TIMESTAMPTZ, PRIMARY KEY (id), UNIQUE (id, code))"
        )
    inspector = sa.inspect(engine)
    columns = {c["name"]: c for c in inspector.get_columns(table)}
    assert columns["id"]["nullable"] is False and columns["code"]["nullable"] is False
    assert isinstance(columns["at"]["type"], sa.TIMESTAMP) and columns["at"]["type"].timezone
    assert inspector.get_pk_constraint(table) == {
        "constrained_columns": ["id"], "name": f"{table}_pkey", "comment": None, "dialect_options": {"postgresql_include": []},
    }
    unique = inspector.get_unique_constraints(table)
    assert [(u["name"], u["column_names"]) for u in unique] == [(f"{table}_id_code_key", ["id", "code"])]
    assert [(i["name"], i["column_names"], i["unique"]) for i in inspector.get_indexes(table)] == [(f"{table}_id_code_key", ["id", "code"], True)]
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {table}")
    engine.dispose()
