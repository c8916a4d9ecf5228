package clienttest

import (
	"errors"
	"math/big"

	"github.com/jackc/pgx/v5/pgconn"
)

func bigInt(v int64) *big.Int { return big.NewInt(v) }

func asPgError(err error, target **pgconn.PgError) bool { return errors.As(err, target) }
