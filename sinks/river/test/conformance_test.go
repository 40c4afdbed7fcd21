package riversink_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxer-go/outboxer/core"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
	"github.com/outboxer-go/outboxer/sinktest"
)

// TestConformance runs the sink conformance suite on River in a real PostgreSQL: each
// case gets a schema of its own with River's tables, reached through a TCP proxy the
// harness can cut (the broker going down), and reads the jobs back from river_job in
// job ID order.
//
// Sink (New, unique jobs) and TxSink (DeliverTx in a transaction committed after each
// call, as the engine does) both run it. Cases that do not apply are skipped:
//   - PartialFailure: a batch is one InsertMany, one INSERT statement: River takes all of
//     it or none, so a refused send never leaves part of a batch delivered.
//   - BatchOverLimit: InsertMany has no batch limit.
//   - Oversize: River stores args as jsonb; there is no small size limit to refuse at.
//
// The suite's RoundTrip case sends binary and plain-text payloads, which the default Job
// (a JSON payload) refuses; the harness builds binaryJob args instead, whose payload
// encoding/json carries as base64.
func TestConformance(t *testing.T) {
	for _, mode := range []string{"Deliver", "DeliverTx"} {
		t.Run(mode, func(t *testing.T) {
			sinktest.Run(t, sinktest.Harness{
				New:      func(t *testing.T) *sinktest.Target { return newRiverTarget(t, mode) },
				Parallel: true,
			})
		})
	}
}

// binaryJob carries any payload: encoding/json writes a []byte as base64.
type binaryJob struct {
	ID       int64             `json:"id"`
	Outbox   string            `json:"outbox"`
	Type     string            `json:"type"`
	GroupKey string            `json:"group_key,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	Payload  []byte            `json:"payload"`
}

func (binaryJob) Kind() string { return "outboxer_binary" }

func binaryJobFor(env core.Envelope) (river.JobArgs, *river.InsertOpts, error) {
	return binaryJob{ID: env.ID, Outbox: env.Outbox, Type: env.Type, GroupKey: env.GroupKey, Headers: env.Headers, Payload: env.Payload}, nil, nil
}

func newRiverTarget(t *testing.T, mode string) *sinktest.Target {
	if strings.HasSuffix(t.Name(), "/PartialFailure") {
		t.Skip("River inserts a batch with one InsertMany (one INSERT): all of it or none, never part")
	}
	db := newRiverDB(t)
	ctx := t.Context()
	// The broker refusing sends: a statement trigger on river_job refuses the INSERTs
	// numbered up to refuse_until. A sequence counts them, outside any transaction, so
	// the count survives the refused statement's rollback.
	s := db.Schema
	for _, q := range []string{
		`CREATE SEQUENCE ` + s + `.sinktest_sends`,
		`CREATE TABLE ` + s + `.sinktest_refuse (until bigint NOT NULL)`,
		`INSERT INTO ` + s + `.sinktest_refuse VALUES (0)`,
		`CREATE FUNCTION ` + s + `.sinktest_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('` + s + `.sinktest_sends') <= (SELECT until FROM ` + s + `.sinktest_refuse) THEN
				RAISE EXCEPTION 'job insert refused (injected by the test)';
			END IF;
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER sinktest_refuse BEFORE INSERT ON ` + s + `.river_job FOR EACH STATEMENT EXECUTE FUNCTION ` + s + `.sinktest_refuse()`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	failNext := func(n int) {
		_, err := db.ExecContext(context.Background(), `UPDATE `+s+`.sinktest_refuse SET until =
			(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM `+s+`.sinktest_sends) + $1`, n)
		if err != nil {
			t.Errorf("refuse the next %d insert(s): %v", n, err)
		}
	}

	px := newProxy(t, db.DSN)
	opts := riversink.Options{Job: binaryJobFor}
	var relay core.Relay
	switch mode {
	case "Deliver":
		pool, err := pgxpool.New(ctx, px.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: s})
		if err != nil {
			t.Fatal(err)
		}
		if relay, err = riversink.New(client, opts); err != nil {
			t.Fatal(err)
		}
	case "DeliverTx":
		sqlDB, err := sql.Open("pgx", px.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sqlDB.Close() })
		client, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{Schema: s})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := riversink.NewTx(client, opts)
		if err != nil {
			t.Fatal(err)
		}
		relay = committing(sqlDB, sink)
	}
	return &sinktest.Target{
		Relay:    relay,
		Read:     func(ctx context.Context, n int) ([]sinktest.Received, error) { return readJobs(ctx, db, n) },
		FailNext: failNext,
		Stop:     px.stop,
		Start:    px.start,
	}
}

// committing delivers each batch the way the engine does with a TxRelay: DeliverTx in a
// transaction of its own, committed afterwards (the failures are recorded in it too).
func committing(db *sql.DB, sink *riversink.TxSink) core.Relay {
	return core.RelayFunc(func(ctx context.Context, batch []core.Envelope) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		result := sink.DeliverTx(ctx, tx, batch)
		if err := tx.Commit(); err != nil {
			return errors.Join(result, fmt.Errorf("commit: %w", err))
		}
		return result
	})
}

// readJobs waits until at least n jobs exist and returns them all in job ID order.
func readJobs(ctx context.Context, db *riverDB, n int) ([]sinktest.Received, error) {
	var got []sinktest.Received
	var err error
	waitFor(ctx, 20*time.Millisecond, func() bool {
		got, err = listJobs(ctx, db.DB.DB)
		return err == nil && len(got) >= n
	})
	if err != nil {
		return got, err
	}
	if len(got) < n {
		return got, ctx.Err()
	}
	return got, nil
}

func listJobs(ctx context.Context, db *sql.DB) ([]sinktest.Received, error) {
	rows, err := db.QueryContext(ctx, `SELECT args FROM river_job ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sinktest.Received
	for rows.Next() {
		var args []byte
		if err := rows.Scan(&args); err != nil {
			return nil, err
		}
		var j binaryJob
		if err := json.Unmarshal(args, &j); err != nil {
			return nil, fmt.Errorf("job args %s: %w", args, err)
		}
		out = append(out, sinktest.Received{ID: j.ID, Outbox: j.Outbox, Type: j.Type, GroupKey: j.GroupKey, Payload: j.Payload, Headers: j.Headers})
	}
	return out, rows.Err()
}

// proxy forwards TCP connections to PostgreSQL; stop cuts every connection and refuses
// new ones, start accepts them again on the same address.
type proxy struct {
	t      testing.TB
	target string // host:port of the server
	addr   string // where the proxy listens
	dsn    string // the DSN through the proxy

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newProxy(t testing.TB, dsn string) *proxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: u.Host, addr: "127.0.0.1:0", conns: map[net.Conn]bool{}}
	p.start()
	u.Host = p.addr
	p.dsn = u.String()
	t.Cleanup(func() {
		p.stop()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Errorf("proxy: listen on %s: %v", p.addr, err)
		return
	}
	p.ln, p.addr = ln, ln.Addr().String()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.forward(c) })
		}
	})
}

func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *proxy) forward(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // stopped meanwhile
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[client], p.conns[server] = true, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Go(func() { pipe(server, client) })
	pipe(client, server)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}
