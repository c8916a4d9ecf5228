"""Connection settings for the Python client tests, from the environment the
Rust test `clients.rs` sets: a running FoamDB cluster with a password and TLS."""

import os
import uuid

import pytest


def settings():
    return {
        "host": os.environ["FOAM_HOST"],
        "port": int(os.environ["FOAM_PORT"]),
        "user": os.environ["FOAM_USER"],
        "password": os.environ["FOAM_PASSWORD"],
        "dbname": os.environ["FOAM_DB"],
        "sslrootcert": os.environ["FOAM_SSLROOTCERT"],
    }


@pytest.fixture
def conninfo():
    """A libpq connection string that verifies the node's certificate."""
    s = settings()
    return (
        f"host={s['host']} port={s['port']} user={s['user']} password={s['password']} "
        f"dbname={s['dbname']} sslmode=verify-full sslrootcert={s['sslrootcert']}"
    )


@pytest.fixture
def table():
    """A table name no other test uses (the tests share one cluster)."""
    return "t_" + uuid.uuid4().hex[:10]
