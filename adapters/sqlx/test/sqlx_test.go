package sqlxoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/outboxer-go/outboxer/adapters/adaptertest"
	sqlxoutbox "github.com/outboxer-go/outboxer/adapters/sqlx"
	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var adapter = adaptertest.Adapter{
	Open: func(t testing.TB, db *dbtest.DB) adaptertest.ORM {
		return orm{sqlx.NewDb(db.DB, db.Driver)}
	},
}

func TestConformance(t *testing.T) { adaptertest.Run(t, adapter) }

func BenchmarkPublish(b *testing.B) { adaptertest.Bench(b, adapter) }

type orm struct{ db *sqlx.DB }

func (o orm) InTx(ctx context.Context, ob *core.Outboxer, fn func(context.Context, adaptertest.Tx) error) error {
	return sqlxoutbox.InTx(ctx, ob, o.db, nil, func(tx *sqlx.Tx, p *core.TxPublisher) error {
		return fn(ctx, txn{tx: tx, publish: p.Publish})
	})
}

func (o orm) Begin(ctx context.Context, ob *core.Outboxer) (adaptertest.OpenTx, error) {
	tx, err := o.db.BeginTxx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return txn{tx: tx, publish: func(ctx context.Context, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
		return sqlxoutbox.Publish(ctx, ob, tx, m, opts...)
	}}, nil
}

func (o orm) Publish(ctx context.Context, ob *core.Outboxer, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	return sqlxoutbox.Publish(ctx, ob, o.db, m, opts...)
}

func (o orm) PublishAll(ctx context.Context, ob *core.Outboxer, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	return sqlxoutbox.PublishAll(ctx, ob, o.db, msgs, opts...)
}

type txn struct {
	tx      *sqlx.Tx
	publish func(context.Context, core.Message, ...core.PublishOption) (core.Envelope, error)
}

func (t txn) InsertOrder(ctx context.Context, id int64, note string) error {
	_, err := t.tx.NamedExecContext(ctx, `INSERT INTO orders (id, note) VALUES (:id, :note)`, map[string]any{"id": id, "note": note})
	return err
}

func (t txn) Publish(ctx context.Context, m core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	return t.publish(ctx, m, opts...)
}

func (t txn) Savepoint(ctx context.Context, fn func(context.Context, adaptertest.Tx) error) error {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return sqlxoutbox.Savepoint(ctx, t.tx, "sp_"+hex.EncodeToString(b), func() error { return fn(ctx, t) })
}

func (t txn) Commit(context.Context) error   { return t.tx.Commit() }
func (t txn) Rollback(context.Context) error { return t.tx.Rollback() }
