package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"gopkg.in/yaml.v3"

	"github.com/outboxer-go/outboxer/core"
)

// relayConfig is the file `outboxer relay` runs from (YAML or TOML, by extension).
type relayConfig struct {
	Database struct {
		DSN    string `yaml:"dsn" toml:"dsn"`
		Table  string `yaml:"table" toml:"table"`
		Schema string `yaml:"schema" toml:"schema"`
		Notify bool   `yaml:"notify" toml:"notify"`
	} `yaml:"database" toml:"database"`
	Name            string                  `yaml:"name" toml:"name"`
	LeaseDuration   time.Duration           `yaml:"lease_duration" toml:"lease_duration"`
	ShutdownTimeout time.Duration           `yaml:"shutdown_timeout" toml:"shutdown_timeout"`
	PruneInterval   time.Duration           `yaml:"prune_interval" toml:"prune_interval"`
	MaxPartitions   int                     `yaml:"max_partitions" toml:"max_partitions"`
	Outboxes        map[string]outboxConfig `yaml:"outboxes" toml:"outboxes"`
}

type outboxConfig struct {
	Table           string        `yaml:"table" toml:"table"`
	Ordering        string        `yaml:"ordering" toml:"ordering"`
	Partitions      int           `yaml:"partitions" toml:"partitions"`
	BatchSize       int           `yaml:"batch_size" toml:"batch_size"`
	PollInterval    time.Duration `yaml:"poll_interval" toml:"poll_interval"`
	MaxAttempts     int           `yaml:"max_attempts" toml:"max_attempts"`
	DeliveryTimeout time.Duration `yaml:"delivery_timeout" toml:"delivery_timeout"`
	Backoff         struct {
		Min time.Duration `yaml:"min" toml:"min"`
		Max time.Duration `yaml:"max" toml:"max"`
	} `yaml:"backoff" toml:"backoff"`
	// Retention is "delete" (the default) or how long delivered messages are kept ("72h").
	Retention string     `yaml:"retention" toml:"retention"`
	Paused    bool       `yaml:"paused" toml:"paused"`
	Sink      sinkConfig `yaml:"sink" toml:"sink"`
}

// sinkConfig names where an outbox's messages go. Type says which fields apply.
type sinkConfig struct {
	Type string `yaml:"type" toml:"type"`

	// amqp: the broker's URL; river: another PostgreSQL database holding River's tables.
	URL string `yaml:"url" toml:"url"`
	// amqp, kafka: where the messages go (amqp: the queue, or the exchange with fanout).
	Topic string `yaml:"topic" toml:"topic"`
	// amqp: "queue" (a queue named Topic on the default exchange; the default) or
	// "fanout" (a fanout exchange named Topic).
	Mode string `yaml:"mode" toml:"mode"`
	// amqp: durable queues or exchanges and persistent messages (default true).
	Durable *bool `yaml:"durable" toml:"durable"`

	// kafka
	Brokers     []string `yaml:"brokers" toml:"brokers"`
	Compression string   `yaml:"compression" toml:"compression"` // none, snappy (default), lz4, zstd, gzip
	Acks        string   `yaml:"acks" toml:"acks"`               // all (default) or leader

	// sqs
	QueueURL       string `yaml:"queue_url" toml:"queue_url"`
	Region         string `yaml:"region" toml:"region"`
	Endpoint       string `yaml:"endpoint" toml:"endpoint"`
	AllowUnordered bool   `yaml:"allow_unordered" toml:"allow_unordered"`

	// river
	Queue       string `yaml:"queue" toml:"queue"`
	Kind        string `yaml:"kind" toml:"kind"`
	Priority    int    `yaml:"priority" toml:"priority"`
	MaxAttempts int    `yaml:"max_attempts" toml:"max_attempts"`
	Schema      string `yaml:"schema" toml:"schema"`
}

// loadConfig reads a YAML (.yaml, .yml) or TOML (.toml) file, refusing unknown keys.
func loadConfig(path string) (*relayConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("cannot read --config: %v", err)
	}
	var cfg relayConfig
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return nil, usagef("%s: %v", path, err)
		}
	case ".toml":
		md, err := toml.Decode(string(data), &cfg)
		if err != nil {
			return nil, usagef("%s: %v", path, err)
		}
		if un := md.Undecoded(); len(un) > 0 {
			return nil, usagef("%s: unknown key %s", path, un[0])
		}
	default:
		return nil, usagef("--config %s: want a .yaml, .yml or .toml file", path)
	}
	return &cfg, nil
}

// expandEnv replaces ${NAME} and $NAME with environment variables, refusing unset ones,
// so that passwords can stay out of the file.
func expandEnv(field, s string) (string, error) {
	var missing []string
	out := os.Expand(s, func(name string) string {
		v, ok := os.LookupEnv(name)
		if !ok {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", usagef("%s names environment variable %s, which is not set", field, missing[0])
	}
	return out, nil
}

// sinkTypes are the sink types, with the fields each takes.
var sinkTypes = map[string][]string{
	"amqp":   {"url", "topic", "mode", "durable"},
	"kafka":  {"brokers", "topic", "compression", "acks"},
	"sqs":    {"queue_url", "region", "endpoint", "allow_unordered"},
	"river":  {"queue", "kind", "priority", "max_attempts", "url", "schema"},
	"stdout": {},
}

func supportedSinks() string {
	names := make([]string, 0, len(sinkTypes))
	for n := range sinkTypes {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// coreConfig validates the file and turns it into the core's configuration, without
// relays (they are built once the file is known to be good).
func (c *relayConfig) coreConfig() (core.Config, error) {
	cfg := core.Config{
		Name:            c.Name,
		Table:           c.Database.Table,
		Schema:          c.Database.Schema,
		Notify:          c.Database.Notify,
		LeaseDuration:   c.LeaseDuration,
		ShutdownTimeout: c.ShutdownTimeout,
		PruneInterval:   c.PruneInterval,
		MaxPartitions:   c.MaxPartitions,
		Outboxes:        map[string]core.OutboxConfig{},
	}
	if cfg.Name == "" {
		cfg.Name = "outboxer-relay"
	}
	if len(c.Outboxes) == 0 {
		return cfg, usagef("configuration names no outboxes (want an outboxes: section)")
	}
	for name, oc := range c.Outboxes {
		field := func(f string) string { return "outboxes." + name + "." + f }
		o := core.OutboxConfig{
			Table: oc.Table, Partitions: oc.Partitions, BatchSize: oc.BatchSize, PollInterval: oc.PollInterval,
			MaxAttempts: oc.MaxAttempts, DeliveryTimeout: oc.DeliveryTimeout, Paused: oc.Paused,
			Backoff: core.Backoff{Min: oc.Backoff.Min, Max: oc.Backoff.Max},
		}
		switch strings.ToLower(oc.Ordering) {
		case "", "group":
			o.Ordering = core.OrderGroup
		case "total":
			o.Ordering = core.OrderTotal
		case "none":
			o.Ordering = core.OrderNone
		default:
			return cfg, usagef("%s: %q is not one of group, total, none", field("ordering"), oc.Ordering)
		}
		switch strings.ToLower(oc.Retention) {
		case "", "delete":
			o.Retention = core.Delete
		default:
			d, err := time.ParseDuration(oc.Retention)
			if err != nil || d <= 0 {
				return cfg, usagef(`%s: %q is neither "delete" nor a positive duration such as "72h"`, field("retention"), oc.Retention)
			}
			o.Retention = core.KeepFor(d)
		}
		if err := oc.Sink.validate(field("sink")); err != nil {
			return cfg, err
		}
		cfg.Outboxes[name] = o
	}
	return cfg, nil
}

func (s *sinkConfig) validate(field string) error {
	t := strings.ToLower(s.Type)
	if t == "watermill-amqp" {
		t = "amqp"
	}
	s.Type = t
	if t == "" {
		return usagef("%s.type is required (one of %s)", field, supportedSinks())
	}
	allowed, ok := sinkTypes[t]
	if !ok {
		return usagef("%s.type %q is not supported (supported: %s)", field, s.Type, supportedSinks())
	}
	set := map[string]bool{
		"url": s.URL != "", "topic": s.Topic != "", "mode": s.Mode != "", "durable": s.Durable != nil,
		"brokers": len(s.Brokers) > 0, "compression": s.Compression != "", "acks": s.Acks != "",
		"queue_url": s.QueueURL != "", "region": s.Region != "", "endpoint": s.Endpoint != "", "allow_unordered": s.AllowUnordered,
		"queue": s.Queue != "", "kind": s.Kind != "", "priority": s.Priority != 0, "max_attempts": s.MaxAttempts != 0, "schema": s.Schema != "",
	}
	for _, name := range slices.Sorted(mapKeys(set)) {
		if set[name] && !slices.Contains(allowed, name) {
			return usagef("%s.%s does not apply to sink type %s (it takes: %s)", field, name, t, strings.Join(allowed, ", "))
		}
	}
	need := func(names ...string) error {
		for _, n := range names {
			if !set[n] {
				return usagef("%s: sink type %s needs %s", field, t, n)
			}
		}
		return nil
	}
	var err error
	expand := func(name string, v *string) {
		if err == nil && *v != "" {
			*v, err = expandEnv(field+"."+name, *v)
		}
	}
	expand("url", &s.URL)
	expand("queue_url", &s.QueueURL)
	expand("endpoint", &s.Endpoint)
	if err != nil {
		return err
	}
	switch t {
	case "amqp":
		if s.Mode != "" && s.Mode != "queue" && s.Mode != "fanout" {
			return usagef("%s.mode %q is not one of queue, fanout", field, s.Mode)
		}
		return need("url", "topic")
	case "kafka":
		if s.Acks != "" && s.Acks != "all" && s.Acks != "leader" {
			return usagef("%s.acks %q is not one of all, leader", field, s.Acks)
		}
		return need("brokers", "topic")
	case "sqs":
		return need("queue_url")
	case "river":
		if s.Schema != "" && !identRE.MatchString(s.Schema) {
			return usagef("%s.schema %q is not a valid name", field, s.Schema)
		}
	}
	return nil
}
