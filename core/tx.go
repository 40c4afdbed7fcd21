package core

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
)

// TxPublisher publishes through one transaction and remembers what it published, so that
// the workers can be woken as soon as the transaction commits. The run-in-transaction
// helpers (InTx here, and those of the adapters) hand one to the caller's function.
type TxPublisher struct {
	o    *Outboxer
	exec Executor
	mu   sync.Mutex
	envs []Envelope
}

// NewTxPublisher returns a publisher writing through exec, normally a transaction.
func (o *Outboxer) NewTxPublisher(exec Executor) *TxPublisher {
	return &TxPublisher{o: o, exec: exec}
}

// Publish is Outboxer.Publish through the publisher's transaction.
func (p *TxPublisher) Publish(ctx context.Context, msg Message, opts ...PublishOption) (Envelope, error) {
	env, err := p.o.Publish(ctx, p.exec, msg, opts...)
	if err == nil {
		p.mu.Lock()
		p.envs = append(p.envs, env)
		p.mu.Unlock()
	}
	return env, err
}

// PublishAll is Outboxer.PublishAll through the publisher's transaction.
func (p *TxPublisher) PublishAll(ctx context.Context, msgs []Message, opts ...PublishOption) ([]Envelope, error) {
	envs, err := p.o.PublishAll(ctx, p.exec, msgs, opts...)
	if err == nil {
		p.mu.Lock()
		p.envs = append(p.envs, envs...)
		p.mu.Unlock()
	}
	return envs, err
}

// Published returns the envelopes published so far.
func (p *TxPublisher) Published() []Envelope {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Envelope(nil), p.envs...)
}

// Committed wakes this instance's workers for what was published. Call it after the
// transaction committed.
func (p *TxPublisher) Committed() { p.o.Wake(p.Published()...) }

// InTx runs fn in a transaction on db and commits it if fn returns nil: the business
// writes fn makes through tx and the messages it publishes through p commit together or
// not at all. An error or a panic in fn rolls everything back (the panic goes on after
// the rollback). After the commit the workers are woken at once.
func (o *Outboxer) InTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx, p *TxPublisher) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("outboxer: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	p := o.NewTxPublisher(tx)
	if err := fn(tx, p); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxer: commit: %w", err)
	}
	committed = true
	p.Committed()
	return nil
}

// Savepoint runs fn inside a savepoint named name (letters, digits and _) of the
// transaction exec. When fn returns an error or panics, the transaction goes back to the
// savepoint, dropping what fn wrote and published, and the error is returned (the panic
// goes on); the rest of the transaction is kept. Otherwise the savepoint is released.
// PostgreSQL, MariaDB and SQLite all have savepoints; this is for handles whose library
// has no nested transactions of its own.
func Savepoint(ctx context.Context, exec Executor, name string, fn func() error) error {
	if !validIdent(name) {
		return fmt.Errorf("outboxer: savepoint name %q: letters, digits and _ only", name)
	}
	if _, err := exec.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("outboxer: savepoint: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_, _ = exec.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name)
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	done = true
	if _, err := exec.ExecContext(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("outboxer: release savepoint: %w", err)
	}
	return nil
}
