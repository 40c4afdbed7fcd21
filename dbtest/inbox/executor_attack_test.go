package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	"github.com/outboxer-go/outboxer/inbox"
)

// notInTx is an executor that says it is outside a transaction (an ORM handle, say).
type notInTx struct{ *sql.DB }

func (notInTx) InTransaction() bool { return false }

// TestAttackClaimOutsideTransaction: Claim given an autocommit handle would make the
// record permanent at once; a handler failing after it would leave the message
// recorded and never handled, its redelivery a Duplicate: lost. Claim refuses the
// handles it knows are not transactions, before writing anything.
func TestAttackClaimOutsideTransaction(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		in := setup(t, db, inbox.Config{})
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for name, exec := range map[string]core.Executor{"*sql.DB": db.DB, "*sql.Conn": conn, "Transactional, not in one": notInTx{db.DB}, "nil": nil} {
			if o, err := in.Claim(ctx, exec, "billing", inbox.Message{Key: "k"}); !errors.Is(err, core.ErrInvalidExecutor) {
				t.Errorf("Claim through %s: %v, %v; want ErrInvalidExecutor", name, o, err)
			}
		}
		if n := count(t, db, `SELECT count(*) FROM outboxer_inbox`); n != 0 {
			t.Errorf("%d records written outside a transaction", n)
		}
		// Through a transaction it claims, and the record is the transaction's.
		if o := claim(t, in, db.DB, "billing", inbox.Message{Key: "k"}, false); o != inbox.Claimed {
			t.Errorf("in a transaction: %v", o)
		}
		if n := count(t, db, `SELECT count(*) FROM outboxer_inbox`); n != 0 {
			t.Errorf("%d records after the rollback", n)
		}
	})
}
