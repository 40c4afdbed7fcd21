package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"

	"github.com/outboxer-go/outboxer/core"
	kafkasink "github.com/outboxer-go/outboxer/sinks/kafka"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
	sqssink "github.com/outboxer-go/outboxer/sinks/sqs"
	watermillsink "github.com/outboxer-go/outboxer/sinks/watermill"
)

func runRelay(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "relay")
	configPath := fs.String("config", "", "the relay's configuration file, YAML (.yaml, .yml) or TOML (.toml) (required)")
	check := fs.Bool("check", false, "check the configuration file and exit, without connecting to anything")
	logFormat := fs.String("log-format", "text", "log format on stderr: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("relay takes no arguments, got %q", pos)
	}
	if *configPath == "" {
		return usagef("--config is required")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level %q is not one of debug, info, warn, error", *logLevel)
	}
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})
	case "json":
		handler = slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level})
	default:
		return usagef("--log-format %q is not one of text, json", *logFormat)
	}
	logger := slog.New(handler)

	rc, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	cfg, err := rc.coreConfig()
	if err != nil {
		return err
	}
	// The DSN: --dsn when given, else the file's, else $OUTBOXER_DSN.
	dsn := rc.Database.DSN
	if flagSet := isSet(fs, "dsn"); flagSet || dsn == "" {
		dsn = fs.dsn
	} else if dsn, err = expandEnv("database.dsn", dsn); err != nil {
		return err
	}
	if isSet(fs, "table") || cfg.Table == "" {
		cfg.Table = fs.table
	}
	if isSet(fs, "schema") {
		cfg.Schema = fs.schema
	}
	t, err := parseDSN(dsn)
	if err != nil {
		return err
	}
	if err := checkNames(cfg.Table, cfg.Schema, t.dialect); err != nil {
		return err
	}
	// Validate everything the core checks before connecting to anything.
	cfg.Dialect = t.dialect
	if err := validateWithCore(cfg); err != nil {
		return err
	}
	if *check {
		fmt.Fprintf(e.stdout, "configuration %s is valid: %d outbox(es) on the %s\n", *configPath, len(cfg.Outboxes), t.name)
		return nil
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, _, err := open(ctx, dsn, false)
	if err != nil {
		return err
	}
	defer db.Close()
	cfg.DB = db
	cfg.Logger = logger

	sinks := &sinkSet{stdout: e.stdout}
	defer sinks.Close()
	for _, name := range slices.Sorted(mapKeys(rc.Outboxes)) {
		oc := cfg.Outboxes[name]
		if oc.Table == "" {
			oc.Table = cfg.Table
		}
		r, err := sinks.build(ctx, rc.Outboxes[name].Sink, oc, t.dialect, logger)
		if err != nil {
			return fmt.Errorf("outbox %q: %w", name, err)
		}
		oc.Relay = r
		cfg.Outboxes[name] = oc
	}
	ob, err := core.New(cfg)
	if err != nil {
		return usagef("%v", err)
	}
	// A worker per partition, and the membership, sweep and pruner beside them: their
	// connections stay open between statements instead of being closed and opened anew.
	idle := 4
	for _, oc := range cfg.Outboxes {
		idle += max(oc.Partitions, 1)
	}
	db.SetMaxIdleConns(idle)
	logger.Info("outboxer relay: starting", "database", t.name, "outboxes", ob.Outboxes())
	if err := ob.Run(ctx); err != nil {
		return err
	}
	logger.Info("outboxer relay: stopped; partitions released")
	return nil
}

// placeholderDB stands for the database while the core validates the configuration:
// core.New does no I/O, so it is never used.
var placeholderDB = new(sql.DB)

// validateWithCore runs the core's validation on cfg with a placeholder database and
// relays, so that a bad option is reported before any connection is made.
func validateWithCore(cfg core.Config) error {
	cfg.DB = placeholderDB
	outboxes := make(map[string]core.OutboxConfig, len(cfg.Outboxes))
	for n, o := range cfg.Outboxes {
		o.Relay = core.RelayFunc(func(context.Context, []core.Envelope) error { return nil })
		outboxes[n] = o
	}
	cfg.Outboxes = outboxes
	if _, err := core.New(cfg); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func isSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// sinkSet builds the relays and closes what they hold when the relay stops.
type sinkSet struct {
	stdout  io.Writer
	closers []func() error
	mu      sync.Mutex // serialises writes of stdout sinks
}

func (s *sinkSet) Close() error {
	var errs []error
	for _, c := range slices.Backward(s.closers) {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

func (s *sinkSet) build(ctx context.Context, sc sinkConfig, oc core.OutboxConfig, d core.Dialect, logger *slog.Logger) (core.Relay, error) {
	switch sc.Type {
	case "amqp":
		durable := sc.Durable == nil || *sc.Durable
		var cfg amqp.Config
		switch {
		case sc.Mode == "fanout" && durable:
			cfg = amqp.NewDurablePubSubConfig(sc.URL, nil)
		case sc.Mode == "fanout":
			cfg = amqp.NewNonDurablePubSubConfig(sc.URL, nil)
		case durable:
			cfg = amqp.NewDurableQueueConfig(sc.URL)
		default:
			cfg = amqp.NewNonDurableQueueConfig(sc.URL)
		}
		// A nil from Publish must mean that the broker has the message.
		cfg.Publish.ConfirmDelivery = true
		pub, err := amqp.NewPublisher(cfg, watermill.NewSlogLogger(logger))
		if err != nil {
			return nil, fmt.Errorf("connect to RabbitMQ: %w", err)
		}
		s.closers = append(s.closers, pub.Close)
		return watermillsink.New(pub, watermillsink.Options{Topic: sc.Topic, Table: oc.Table})
	case "kafka":
		cfg := kafkasink.Config{Brokers: sc.Brokers, Topic: sc.Topic, Compression: kafkasink.Compression(sc.Compression)}
		if sc.Acks == "leader" {
			cfg.Acks = kafkasink.AcksLeader
		}
		r, err := kafkasink.New(cfg)
		if err != nil {
			return nil, err
		}
		return r, nil // a Closer: Run closes it
	case "sqs":
		awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("AWS configuration: %w", err)
		}
		client := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
			if sc.Region != "" {
				o.Region = sc.Region
			}
			if sc.Endpoint != "" {
				o.BaseEndpoint = &sc.Endpoint
			}
		})
		return sqssink.New(sqssink.Config{Client: client, QueueURL: sc.QueueURL, Ordering: oc.Ordering,
			AllowUnordered: sc.AllowUnordered, Table: oc.Table, Logger: logger})
	case "river":
		opts := riversink.Options{
			Kind:       sc.Kind,
			InsertOpts: river.InsertOpts{Queue: sc.Queue, Priority: sc.Priority, MaxAttempts: sc.MaxAttempts},
			Table:      oc.Table,
			Ordering:   oc.Ordering,
		}
		if sc.URL == "" {
			// River's tables are in the outbox's database: jobs are inserted in the
			// transaction that removes the rows, exactly once.
			if d != core.Postgres {
				return nil, fmt.Errorf("sink type river needs PostgreSQL: set url to River's PostgreSQL database")
			}
			client, err := river.NewClient(riverdatabasesql.New(nil), &river.Config{Schema: sc.Schema})
			if err != nil {
				return nil, fmt.Errorf("river client: %w", err)
			}
			return riversink.NewTx(client, opts)
		}
		if t, err := parseDSN(sc.URL); err != nil || t.dialect != core.Postgres {
			return nil, fmt.Errorf("sink url: want River's postgres:// database")
		}
		rdb, _, err := open(ctx, sc.URL, false)
		if err != nil {
			return nil, fmt.Errorf("River's database: %w", err)
		}
		s.closers = append(s.closers, rdb.Close)
		client, err := river.NewClient(riverdatabasesql.New(rdb), &river.Config{Schema: sc.Schema})
		if err != nil {
			return nil, fmt.Errorf("river client: %w", err)
		}
		return riversink.New(client, opts)
	case "stdout":
		return core.RelayFunc(s.deliverStdout), nil
	}
	return nil, fmt.Errorf("sink type %q is not supported (supported: %s)", sc.Type, supportedSinks())
}

// deliverStdout writes each message as one JSON line.
func (s *sinkSet) deliverStdout(ctx context.Context, batch []core.Envelope) error {
	var buf []byte
	for _, env := range batch {
		line, err := json.Marshal(toMessage(env))
		if err != nil {
			return core.Permanent(err)
		}
		buf = append(append(buf, line...), '\n')
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.stdout.Write(buf); err != nil {
		return fmt.Errorf("write to stdout: %w", err)
	}
	return nil
}
