package entoutbox

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"entgo.io/ent"

	"github.com/outboxer-go/outboxer/core"
)

// ExecQuerier is what ent's generated Client and Tx have when the code is generated with
// the sql/execquery feature: ExecContext and QueryContext on the database or transaction
// under them.
type ExecQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Tx is ent's generated transaction (*ent.Tx) generated with sql/execquery.
type Tx interface {
	ExecQuerier
	Commit() error
	Rollback() error
}

// Executor returns the core executor behind an ent handle. It is a transaction when the
// handle is one (it has Commit and Rollback, as the generated *ent.Tx has). A nil
// handle gives nil, which Publish refuses with core.ErrInvalidExecutor.
func Executor(db ExecQuerier) core.Executor {
	if isNil(db) {
		return nil
	}
	_, tx := db.(interface {
		Commit() error
		Rollback() error
	})
	return executor{db, tx}
}

type executor struct {
	ExecQuerier
	tx bool
}

func (e executor) InTransaction() bool { return e.tx }

// Publish publishes msg through db, normally the *ent.Tx of your business writes: the
// message is stored if and only if the transaction commits.
func Publish(ctx context.Context, ob *core.Outboxer, db ExecQuerier, msg core.Message, opts ...core.PublishOption) (core.Envelope, error) {
	if isNil(db) {
		return core.Envelope{}, errNil("ent client or transaction")
	}
	return ob.Publish(ctx, Executor(db), msg, opts...)
}

// PublishAll publishes msgs through db in one statement per table. On a client (not a
// transaction) several messages go through the instance's DB, in a transaction of their
// own when they take more than one statement, so that all or none are stored.
func PublishAll(ctx context.Context, ob *core.Outboxer, db ExecQuerier, msgs []core.Message, opts ...core.PublishOption) ([]core.Envelope, error) {
	if isNil(db) {
		return nil, errNil("ent client or transaction")
	}
	exec := Executor(db)
	if !exec.(executor).tx && len(msgs) > 1 {
		exec = ob.Config().DB
	}
	return ob.PublishAll(ctx, exec, msgs, opts...)
}

// InTx begins a transaction with begin (client.Tx), runs fn with it and a publisher
// writing through it, and commits if fn returns nil: what fn writes and publishes,
// including what the mutation hooks of Hook publish, commits together or not at all. An
// error or a panic in fn rolls everything back (the panic goes on). After the commit the
// instance's workers are woken at once.
//
//	err := entoutbox.InTx(ctx, ob, client.Tx, func(ctx context.Context, tx *ent.Tx, p *core.TxPublisher) error { … })
func InTx[T Tx](ctx context.Context, ob *core.Outboxer, begin func(context.Context) (T, error), fn func(ctx context.Context, tx T, p *core.TxPublisher) error) error {
	if begin == nil {
		return errNil("begin function")
	}
	tx, err := begin(ctx)
	if err != nil {
		return fmt.Errorf("outboxer: begin: %w", err)
	}
	if isNil(tx) {
		return fmt.Errorf("outboxer: begin: %w", errNil("transaction"))
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback()
		}
	}()
	p := ob.NewTxPublisher(Executor(tx))
	hooked := &published{}
	if err := fn(context.WithValue(ctx, publishedKey{}, hooked), tx, p); err != nil {
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxer: commit: %w", err)
	}
	p.Committed()
	ob.Wake(hooked.take()...)
	return nil
}

// published collects what hooks published inside InTx, to wake the workers after commit.
type published struct {
	mu   sync.Mutex
	envs []core.Envelope
}

type publishedKey struct{}

func (p *published) add(envs []core.Envelope) {
	p.mu.Lock()
	p.envs = append(p.envs, envs...)
	p.mu.Unlock()
}

func (p *published) take() []core.Envelope {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.envs
}

// Derive returns the messages to publish for a mutation that succeeded: m is the
// mutation, v what it returned (the created or updated entity, or the number of rows for
// bulk operations). Return none to publish nothing for this mutation.
type Derive func(ctx context.Context, m ent.Mutation, v ent.Value) ([]core.Message, error)

// Hook returns an ent mutation hook that publishes the messages derive makes from each
// successful mutation, in the mutation's own transaction. T is the generated transaction
// type (*ent.Tx): the hook finds the transaction through the generated mutation's
// Tx() (T, error) method, so the code must be generated with the sql/execquery feature.
//
//	client.Order.Use(entoutbox.Hook[*ent.Tx](ob, derive))
//
// A mutation inside a transaction and its messages commit or roll back together, and an
// error from derive or from publishing fails the mutation (roll back the transaction as
// you would for any failed mutation). On a client outside a transaction the mutation
// commits on its own before the hook publishes, so a crash between the two loses the
// message; an instance with Config.RequireTransaction refuses such a mutation with
// core.ErrNotInTransaction before it runs.
func Hook[T ExecQuerier](ob *core.Outboxer, derive Derive, opts ...core.PublishOption) ent.Hook {
	return func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			txm, ok := m.(interface{ Tx() (T, error) })
			if !ok {
				var t T
				return nil, fmt.Errorf("outboxer: ent hook: the %T has no Tx() (%T, error) method: give Hook the generated transaction type", m, t)
			}
			tx, txErr := txm.Tx()
			inTx := txErr == nil
			if !inTx && ob.Config().RequireTransaction {
				return nil, fmt.Errorf("%w: ent %s mutation (RequireTransaction is set)", core.ErrNotInTransaction, m.Type())
			}
			v, err := next.Mutate(ctx, m)
			if err != nil {
				return v, err
			}
			msgs, err := derive(ctx, m, v)
			if err != nil {
				return nil, fmt.Errorf("outboxer: ent hook: %w", err)
			}
			if len(msgs) == 0 {
				return v, nil
			}
			var exec core.Executor = ob.Config().DB // outside a transaction: stored on its own
			if inTx {
				exec = Executor(tx)
			}
			envs, err := ob.PublishAll(ctx, exec, msgs, opts...)
			if err != nil {
				return nil, err
			}
			if c, ok := ctx.Value(publishedKey{}).(*published); ok && inTx {
				c.add(envs)
			}
			return v, nil
		})
	}
}

// Savepoint runs fn inside a savepoint of tx named name (letters, digits and _). ent has
// no nested transactions; this issues SAVEPOINT, ROLLBACK TO SAVEPOINT and RELEASE
// SAVEPOINT through the transaction. When fn returns an error or panics, the transaction
// goes back to the savepoint, dropping what fn wrote and published, and the error is
// returned (the panic goes on); the rest of tx is kept.
func Savepoint(ctx context.Context, tx ExecQuerier, name string, fn func() error) error {
	if isNil(tx) {
		return errNil("ent transaction")
	}
	return core.Savepoint(ctx, tx, name, fn)
}
