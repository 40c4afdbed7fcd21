package core

import (
	"context"
	"database/sql"
	"fmt"
)

// Executor is the database handle Publish writes through. *sql.DB, *sql.Tx and *sql.Conn
// satisfy it as they are; the adapters turn an ORM's or a driver's transaction into one.
//
// Besides ExecContext, Publish reads rows back (the new IDs): through QueryContext when
// the handle has database/sql's, or through Querier when it implements that.
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Querier is implemented by executors that are not database/sql handles (pgx, say), to
// run a query and hand each row to scan.
type Querier interface {
	QueryRows(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error
}

// Transactional is implemented by executors that know whether they are inside a
// transaction. *sql.Tx is one without it; every other database/sql handle is not.
type Transactional interface {
	InTransaction() bool
}

type sqlQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

type txBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// queryRows runs query on exec and calls each for every row.
func queryRows(ctx context.Context, exec Executor, query string, args []any, each func(scan func(dest ...any) error) error) error {
	switch q := exec.(type) {
	case sqlQuerier:
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := each(rows.Scan); err != nil {
				return err
			}
		}
		return rows.Err()
	case Querier:
		return q.QueryRows(ctx, query, args, each)
	}
	return fmt.Errorf("%w: the executor %T can run statements but not read rows (it needs QueryContext or core.Querier)", ErrInvalidExecutor, exec)
}

// inTransaction reports whether exec is a transaction.
func inTransaction(exec Executor) bool {
	switch e := exec.(type) {
	case *sql.Tx:
		return true
	case Transactional:
		return e.InTransaction()
	}
	return false
}
