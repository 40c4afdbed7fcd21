package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
)

// The Kafka headers the sink adds to every record, besides the message's own headers.
const (
	HeaderID     = "outboxer-id"     // the envelope's ID, in decimal
	HeaderType   = "outboxer-type"   // the envelope's Type
	HeaderOutbox = "outboxer-outbox" // the outbox the message was published to
	// HeaderKey is the message key (core.MessageKey of Config.Source, Config.Table and
	// the ID): the key consumers deduplicate on, with the inbox package for one.
	HeaderKey = core.HeaderKey
)

// DefaultMaxRecordBytes is the default Config.MaxRecordBytes: under Kafka's default
// message.max.bytes (1 MiB) with room for the batch framing.
const DefaultMaxRecordBytes = 1_000_000

// DefaultLinger is the default Config.Linger.
const DefaultLinger = 100 * time.Millisecond

// Acks says when Kafka confirms a record.
type Acks int

const (
	// AcksAll waits until every in-sync replica has the record. The default, and the
	// only setting that works with the idempotent producer.
	AcksAll Acks = iota
	// AcksLeader waits for the partition leader only. It turns the idempotent producer
	// off (Kafka requires acks=all for it), so a retried request can duplicate or, with
	// several requests in flight, reorder records; a leader that fails before the
	// replicas copy the record loses it. Use it only if you accept both.
	AcksLeader
)

// Compression of record batches on the wire.
type Compression string

// The codecs Kafka supports.
const (
	CompressionNone   Compression = "none"
	CompressionSnappy Compression = "snappy" // the default: cheap, and good on JSON
	CompressionLZ4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
	CompressionGzip   Compression = "gzip"
)

// Config configures a Relay. Give either Client or Brokers; and either Topic or TopicFunc.
type Config struct {
	// Client is a client you built and keep: the relay uses it as is and does not close
	// it. Its producer settings are yours: keep the idempotent producer on (franz-go's
	// default), set kgo.ProducerLinger above zero (see Linger; New refuses a client
	// without) and kgo.ProducerBatchMaxBytes above MaxRecordBytes. When Client is set,
	// Brokers, Acks, Compression, Linger and ClientOptions must be unset.
	Client *kgo.Client

	// Brokers to bootstrap from ("host:port"). The relay builds its own client and
	// closes it in Close.
	Brokers []string
	// Acks: AcksAll (default) or AcksLeader.
	Acks Acks
	// Compression: CompressionSnappy by default.
	Compression Compression
	// Linger is how long the client lets a partition's records wait for more before
	// sending them. Deliver flushes its records as soon as they are all buffered, so
	// linger adds no latency; it makes each Deliver's records of a partition leave as
	// one record batch, which Kafka writes or refuses whole. (With no linger the client
	// sends the first records alone, and a refused first request followed by a written
	// second one would put a group's later message before its earlier one.)
	// Default 100 ms; between 1 ms and 1 s.
	Linger time.Duration
	// ClientOptions are added to the client the relay builds: TLS, SASL, logging,
	// timeouts. Options set by the fields above come first, so these win.
	ClientOptions []kgo.Opt

	// Topic every message goes to.
	Topic string
	// TopicFunc chooses the topic per message instead. It must return a non-empty name;
	// a message for which it returns "" is refused with core.Permanent.
	TopicFunc func(core.Envelope) string

	// MaxRecordBytes bounds a record's key, value and headers together. A larger message
	// is refused with core.Permanent before anything is sent, so it goes dead instead of
	// failing forever. Default DefaultMaxRecordBytes; it must stay below the topic's
	// max.message.bytes.
	MaxRecordBytes int

	// Table is the outbox table the messages come from (core.DefaultTable when empty)
	// and Source a name of its database: both go into each record's HeaderKey. Set
	// Table when the outbox has a table of its own and Source when several databases'
	// outboxes reach the same consumers, so that no two rows share a key.
	Table, Source string

	// CloudEvents, when set, sends every message as a CloudEvent: in the binary content
	// mode (ce_ headers) unless it says Structured. See CloudEvents.
	CloudEvents *CloudEvents
}

// Relay delivers messages to Kafka. Create it with New; it is safe for concurrent use.
type Relay struct {
	client     *kgo.Client
	owned      bool
	topic      func(core.Envelope) string
	maxBytes   int
	batchBytes int // the client's ProducerBatchMaxBytes
	table      string
	source     string
	ce         *cloudevents.Options // nil: plain records

	// mu makes deliveries take turns, so that no delivery's records are flushed half
	// buffered by another's flush (which would split them over two record batches).
	mu sync.Mutex
}

var _ interface {
	core.Relay
	core.Closer
} = (*Relay)(nil)

// New validates cfg and returns a relay. It does not contact Kafka: a broker that is down
// only makes deliveries fail (and be retried) until it is back.
func New(cfg Config) (*Relay, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("kafka: invalid Config.%s: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.Topic == "" && cfg.TopicFunc == nil:
		return nil, bad("Topic", "set Topic or TopicFunc")
	case cfg.Topic != "" && cfg.TopicFunc != nil:
		return nil, bad("TopicFunc", "set Topic or TopicFunc, not both")
	case cfg.MaxRecordBytes < 0:
		return nil, bad("MaxRecordBytes", "must not be negative, got %d", cfg.MaxRecordBytes)
	case cfg.Linger != 0 && (cfg.Linger < time.Millisecond || cfg.Linger > time.Second):
		return nil, bad("Linger", "must be between 1ms and 1s, got %v", cfg.Linger)
	case cfg.Acks != AcksAll && cfg.Acks != AcksLeader:
		return nil, bad("Acks", "must be AcksAll or AcksLeader, got %d", int(cfg.Acks))
	}
	codec, err := compression(cfg.Compression)
	if err != nil {
		return nil, bad("Compression", "%v", err)
	}
	ce, err := cfg.CloudEvents.options()
	if err != nil {
		return nil, fmt.Errorf("kafka: invalid Config.%w", err)
	}
	r := &Relay{maxBytes: cfg.MaxRecordBytes, topic: cfg.TopicFunc, table: cmp.Or(cfg.Table, core.DefaultTable), source: cfg.Source, ce: ce}
	if r.maxBytes == 0 {
		r.maxBytes = DefaultMaxRecordBytes
	}
	if cfg.Topic != "" {
		topic := cfg.Topic
		r.topic = func(core.Envelope) string { return topic }
	}
	if cfg.Client != nil {
		switch {
		case len(cfg.Brokers) > 0:
			return nil, bad("Brokers", "must be empty when Client is set")
		case cfg.Acks != AcksAll, cfg.Compression != "", cfg.Linger != 0, len(cfg.ClientOptions) > 0:
			return nil, bad("Client", "producer settings (Acks, Compression, Linger, ClientOptions) belong to the client you built; leave them unset")
		}
		if linger, _ := cfg.Client.OptValue(kgo.ProducerLinger).(time.Duration); linger <= 0 {
			return nil, bad("Client", "build it with kgo.ProducerLinger above zero, so that a delivery's records of a partition leave as one batch (see Config.Linger)")
		}
		if limit, _ := cfg.Client.OptValue(kgo.ProducerBatchMaxBytes).(int32); limit > 0 {
			r.batchBytes = int(limit)
		}
		r.client = cfg.Client
		return r, nil
	}
	if len(cfg.Brokers) == 0 {
		return nil, bad("Brokers", "set Brokers or Client")
	}
	for _, b := range cfg.Brokers {
		if b == "" || strings.ContainsAny(b, " \t\n") {
			return nil, bad("Brokers", "invalid address %q", b)
		}
	}
	linger := cfg.Linger
	if linger == 0 {
		linger = DefaultLinger
	}
	r.batchBytes = r.maxBytes + 64<<10
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(linger),
		kgo.ProducerBatchMaxBytes(int32(r.batchBytes)),
	}
	if cfg.Acks == AcksLeader {
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	} else {
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	client, err := kgo.NewClient(append(opts, cfg.ClientOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: building the client: %w", err)
	}
	r.client, r.owned = client, true
	return r, nil
}

func compression(c Compression) (kgo.CompressionCodec, error) {
	switch c {
	case "", CompressionSnappy:
		return kgo.SnappyCompression(), nil
	case CompressionNone:
		return kgo.NoCompression(), nil
	case CompressionLZ4:
		return kgo.Lz4Compression(), nil
	case CompressionZstd:
		return kgo.ZstdCompression(), nil
	case CompressionGzip:
		return kgo.GzipCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown codec %q (want none, snappy, lz4, zstd or gzip)", string(c))
}

// Client returns the client the relay produces with.
func (r *Relay) Client() *kgo.Client { return r.client }

// Close closes the client if the relay built it. Records still buffered fail.
func (r *Relay) Close() error {
	if r.owned {
		r.client.Close()
	}
	return nil
}

// errHeldBack is the cause for a message not sent, or not credited, because an earlier
// message of its group in the same batch failed.
var errHeldBack = errors.New("held back behind a failed message of its group")

// Deliver produces the batch and waits for every record's result. The group key is the
// record key, so a group's records land in one partition, in batch order, and each
// partition's records of a delivery leave as one record batch that Kafka writes or
// refuses whole. It returns nil when all were written, or a *core.PartialFailure naming
// each message that was not, and each later message of a failed one's group, which is
// then not even sent. Deliveries through one Relay take turns.
//
// If ctx ends first, Deliver returns ctx's error: records already sent may still be
// written, and the engine then delivers them again (at least once, never out of order).
func (r *Relay) Deliver(ctx context.Context, batch []core.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	failed := map[int64]error{}
	blocked := map[string]bool{} // groups with a failed message: send nothing more of them
	fail := func(env core.Envelope, err error) {
		failed[env.ID] = err
		if env.GroupKey != "" && !errors.Is(err, core.ErrPermanent) {
			blocked[env.GroupKey] = true
		}
	}
	// Send in chunks whose records fit one record batch even if all go to one partition.
	budget := r.batchBytes - 16<<10
	var (
		records []*kgo.Record
		envs    []core.Envelope
		size    int
	)
	flush := func() error {
		if len(records) == 0 {
			return nil
		}
		if err := r.produce(ctx, records, envs, fail); err != nil {
			return err
		}
		records, envs, size = records[:0], envs[:0], 0
		return nil
	}
	for _, env := range batch {
		if env.GroupKey != "" && blocked[env.GroupKey] {
			failed[env.ID] = fmt.Errorf("kafka: message %d: %w", env.ID, errHeldBack)
			continue
		}
		rec, n, err := r.record(env)
		if err != nil {
			fail(env, err)
			continue
		}
		if size+n > budget {
			if err := flush(); err != nil {
				return err
			}
		}
		records, envs, size = append(records, rec), append(envs, env), size+n
	}
	if err := flush(); err != nil {
		return err
	}
	if len(failed) == 0 {
		return nil
	}
	// A later message of a failed one's group in the same chunk is never credited, even
	// if Kafka took it (on another topic): the engine hands it again after the failed one.
	held := map[string]bool{}
	for _, env := range batch {
		err, isFailed := failed[env.ID]
		switch {
		case env.GroupKey == "":
		case held[env.GroupKey] && !isFailed:
			failed[env.ID] = fmt.Errorf("kafka: message %d: %w", env.ID, errHeldBack)
		case isFailed && !errors.Is(err, core.ErrPermanent):
			held[env.GroupKey] = true
		}
	}
	return &core.PartialFailure{Failed: failed}
}

// produce sends records and reports each failure through fail, in batch order.
func (r *Relay) produce(ctx context.Context, records []*kgo.Record, envs []core.Envelope, fail func(core.Envelope, error)) error {
	index := make(map[*kgo.Record]int, len(records))
	for i, rec := range records {
		index[rec] = i
	}
	done := make(chan kgo.ProduceResults, 1)
	go func() { done <- r.client.ProduceSync(ctx, records...) }()
	var results kgo.ProduceResults
	select {
	case results = <-done:
	case <-ctx.Done():
		return fmt.Errorf("kafka: delivering %d message(s): %w", len(records), ctx.Err())
	}
	errs := make([]error, len(records))
	for _, res := range results {
		if res.Err != nil {
			errs[index[res.Record]] = res.Err
		}
	}
	for i, err := range errs {
		if err != nil {
			fail(envs[i], produceError(envs[i], records[i].Topic, err))
		}
	}
	return nil
}

// record builds env's record and its size (key, value and headers, plus framing), or
// refuses it permanently.
func (r *Relay) record(env core.Envelope) (*kgo.Record, int, error) {
	topic := r.topic(env)
	if topic == "" {
		return nil, 0, core.Permanent(fmt.Errorf("kafka: message %d: TopicFunc returned no topic", env.ID))
	}
	rec := &kgo.Record{Topic: topic, Value: env.Payload}
	if env.GroupKey != "" {
		rec.Key = []byte(env.GroupKey)
	}
	key := core.MessageKey(r.source, r.table, env.ID)
	if r.ce != nil {
		if err := r.cloudEvent(rec, env, key); err != nil {
			return nil, 0, core.Permanent(fmt.Errorf("kafka: %w", err))
		}
	} else {
		names := make([]string, 0, len(env.Headers))
		for k := range env.Headers {
			if k != HeaderID && k != HeaderType && k != HeaderOutbox && k != HeaderKey {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		rec.Headers = make([]kgo.RecordHeader, 0, len(names)+4)
		for _, k := range names {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(env.Headers[k])})
		}
	}
	rec.Headers = append(rec.Headers,
		kgo.RecordHeader{Key: HeaderID, Value: strconv.AppendInt(nil, env.ID, 10)},
		kgo.RecordHeader{Key: HeaderType, Value: []byte(env.Type)},
		kgo.RecordHeader{Key: HeaderOutbox, Value: []byte(env.Outbox)},
		kgo.RecordHeader{Key: HeaderKey, Value: []byte(key)},
	)
	size := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		size += len(h.Key) + len(h.Value)
	}
	if size > r.maxBytes {
		return nil, 0, core.Permanent(fmt.Errorf("kafka: message %d: record of %d bytes (key, value and headers) is too large: MaxRecordBytes is %d", env.ID, size, r.maxBytes))
	}
	return rec, size + 32 + 8*len(rec.Headers), nil
}

// produceError wraps a record's error; errors retrying cannot fix become permanent.
func produceError(env core.Envelope, topic string, err error) error {
	err = fmt.Errorf("kafka: message %d to topic %q: %w", env.ID, topic, err)
	switch {
	case errors.Is(err, kerr.MessageTooLarge),
		errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.InvalidTopicException):
		return core.Permanent(err)
	}
	return err
}
