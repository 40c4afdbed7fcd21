// Prometheus: an order service on embedded SQLite whose outbox metrics are scraped by
// Prometheus, through the OpenTelemetry Prometheus exporter.
//
// The relay sends to a broker that goes down now and then, and rejects "poison" orders for
// good. Watch the backlog, its age and the dead messages move on /metrics:
//
//	go run ./examples/prometheus -addr 127.0.0.1:9464
//	curl -s 127.0.0.1:9464/metrics | grep ^outboxer_
//
// alerts.yml in this directory holds alert rules written against these metrics.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	_ "modernc.org/sqlite"

	"github.com/outboxer-go/outboxer/core"
	outboxerotel "github.com/outboxer-go/outboxer/otel"
)

// OrderPlaced is the event. A poison order is one the broker will never accept.
type OrderPlaced struct {
	OrderID int  `json:"order_id"`
	Poison  bool `json:"poison,omitempty"`
}

func (OrderPlaced) Outbox() string     { return "orders" }
func (e OrderPlaced) GroupKey() string { return fmt.Sprintf("order:%d", e.OrderID) }

// broker is the sink. While down, every delivery fails and is retried; a poison order is
// rejected for good (core.Permanent), so it is dead at once.
type broker struct {
	down      atomic.Bool
	delivered atomic.Int64
}

func (b *broker) Deliver(_ context.Context, batch []core.Envelope) error {
	if b.down.Load() {
		return errors.New("broker unavailable")
	}
	failed := map[int64]error{}
	for _, e := range batch {
		if bytes.Contains(e.Payload, []byte(`"poison":true`)) {
			failed[e.ID] = core.Permanent(errors.New("rejected by the broker: poison order"))
		}
	}
	b.delivered.Add(int64(len(batch) - len(failed)))
	if len(failed) > 0 {
		return &core.PartialFailure{Failed: failed}
	}
	return nil
}

// config is what the flags set.
type config struct {
	addr    string        // where /metrics listens
	refresh time.Duration // outboxerotel.MinRefresh: how old the health may be at a scrape
	every   time.Duration // an order this often; 0: none (the test publishes its own)
}

// app is the running service.
type app struct {
	db      *sql.DB
	ob      *core.Outboxer
	broker  *broker
	addr    string // the address /metrics listens on
	orderID atomic.Int64
}

// publish places an order: its row and its event in one transaction.
func (a *app) publish(ctx context.Context, poison bool) error {
	id := int(a.orderID.Add(1))
	return a.ob.InTx(ctx, a.db, func(tx *sql.Tx, p *core.TxPublisher) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
			return err
		}
		_, err := p.Publish(ctx, OrderPlaced{OrderID: id, Poison: poison})
		return err
	})
}

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:9464", "address of the /metrics endpoint")
	flag.DurationVar(&cfg.refresh, "refresh", 5*time.Second, "read the outbox health at most this often (outboxerotel.MinRefresh)")
	flag.DurationVar(&cfg.every, "every", 500*time.Millisecond, "place an order this often")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, cfg, os.Stdout, func(a *app) {
		if cfg.every > 0 {
			go demo(ctx, a, cfg.every)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
}

// demo places an order every interval, one in ten of them poison, and takes the broker
// down for 15 seconds of every minute.
func demo(ctx context.Context, a *app, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			a.broker.down.Store(now.Second() >= 30 && now.Second() < 45)
			if err := a.publish(ctx, n%10 == 0); err != nil && ctx.Err() == nil {
				log.Print(err)
			}
		}
	}
}

// run serves the metrics and relays the outbox until ctx is done. started is called once
// everything runs.
func run(ctx context.Context, cfg config, out io.Writer, started func(*app)) error {
	dir, err := os.MkdirTemp("", "outboxer-prometheus")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
		return err
	}
	if err := core.Migrate(ctx, db, core.MigrateOptions{}); err != nil {
		return err
	}

	// The OpenTelemetry pipeline: a meter provider whose reader is the Prometheus
	// exporter, registered on a registry of our own that /metrics serves.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.WithoutCancel(ctx))

	// Counters and histograms from the engine's hooks.
	hooks, err := outboxerotel.Hooks(outboxerotel.WithMeterProvider(meters), outboxerotel.WithoutSpans())
	if err != nil {
		return err
	}
	b := &broker{}
	ob, err := core.New(core.Config{
		Name: "shop", DB: db, Hooks: hooks, Logger: slog.New(slog.DiscardHandler),
		Outboxes: map[string]core.OutboxConfig{"orders": {
			Relay: b, Partitions: 2, PollInterval: 50 * time.Millisecond,
			Backoff: core.Backoff{Min: 50 * time.Millisecond, Max: time.Second},
		}},
	})
	if err != nil {
		return err
	}
	// Backlog, lag, dead messages and partition owners from the outbox's health.
	gauges, err := outboxerotel.RegisterGauges(ob, outboxerotel.GaugesMeterProvider(meters), outboxerotel.MinRefresh(cfg.refresh))
	if err != nil {
		return err
	}
	defer gauges.Close()

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(out, "metrics on http://%s/metrics\n", ln.Addr())

	relayed := make(chan error, 1)
	go func() { relayed <- ob.Run(ctx) }()
	started(&app{db: db, ob: ob, broker: b, addr: ln.Addr().String()})

	<-ctx.Done()
	runErr := <-relayed
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return runErr
}
