package kafka

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxer-go/outboxer/inbox"
)

// RecordHandler does a record's work in the consumer's database transaction tx, after
// the inbox claimed the record's key there. o is inbox.Claimed, or inbox.Stale with the
// inbox's stale check (a later record of the group was handled first): the handler
// decides what to do with a stale record in the same transaction. Returning an error
// rolls back its writes and the claim.
type RecordHandler func(ctx context.Context, tx *sql.Tx, rec *kgo.Record, o inbox.Outcome) error

// ConsumerConfig configures a Consumer. Client, Inbox, Name and Handler are required.
type ConsumerConfig struct {
	// Client consumes the topics in a consumer group (kgo.ConsumerGroup,
	// kgo.ConsumeTopics) with kgo.DisableAutoCommit: the Consumer commits the offsets,
	// and only after the records' transactions committed. The Consumer does not close it.
	Client *kgo.Client
	// Inbox records the records' keys in the handler's transactions; its Config.DB is
	// where those transactions run.
	Inbox *inbox.Inbox
	// Name is the consumer's name in the inbox: consumers of one name see a record once
	// between them, consumers of different names each see it.
	Name string
	// Handler does each record's work.
	Handler RecordHandler
	// OnForeign decides what becomes of a record without a key (HeaderKey), one that no
	// outboxer sink wrote (another producer on the topic): when it returns nil the
	// record is skipped (HandleRecord returns inbox.Foreign) and Run commits past it;
	// when it returns an error, Run returns it without committing the record's offset,
	// and the group's next consumer meets the record again. Default
	// inbox.SkipForeign(Inbox.Logger()): skip it and log a warning. inbox.StopOnForeign
	// stops Run at it with an error matching inbox.ErrNoKey; a function of yours can
	// dead-letter it (see inbox.ForeignPolicy).
	OnForeign inbox.ForeignPolicy
}

// Consumer handles the records a franz-go client fetches with an inbox: each record in
// a database transaction that first claims the record's key (HeaderKey), so that a
// record delivered again (the relay after a crash, or Kafka after a consumer restart
// before its offsets were committed) does not run the handler a second time; and the
// records' offsets are committed to Kafka only after their transactions committed.
type Consumer struct {
	cfg ConsumerConfig
}

// NewConsumer validates cfg and returns a Consumer.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	bad := func(field, reason string) error {
		return fmt.Errorf("kafka: invalid ConsumerConfig.%s: %s", field, reason)
	}
	switch {
	case cfg.Client == nil:
		return nil, bad("Client", "is required")
	case cfg.Inbox == nil:
		return nil, bad("Inbox", "is required")
	case cfg.Name == "":
		return nil, bad("Name", "is required")
	case cfg.Handler == nil:
		return nil, bad("Handler", "is required")
	}
	if group, _ := cfg.Client.OptValue(kgo.ConsumerGroup).(string); group == "" {
		return nil, bad("Client", "consume in a group (kgo.ConsumerGroup): the Consumer commits the group's offsets")
	}
	if auto, _ := cfg.Client.OptValue(kgo.DisableAutoCommit).(bool); !auto {
		return nil, bad("Client", "build it with kgo.DisableAutoCommit: offsets must be committed only after the records' transactions")
	}
	if cfg.OnForeign == nil {
		cfg.OnForeign = inbox.SkipForeign(cfg.Inbox.Logger())
	}
	return &Consumer{cfg: cfg}, nil
}

// MessageOf returns what the inbox needs of a record written by the relay: its key
// (HeaderKey) and, for the stale check, its group (the outbox and the record key, see
// inbox.GroupOf) and position (HeaderID). A record without HeaderKey that is a
// CloudEvent, whichever producer wrote it (binary mode ce_ headers, or the structured
// mode's JSON event), is keyed on its id: the id itself when it is a UUID, or else a
// hash of its source and id (ids are unique per source); it has no stale check. It
// returns an error matching inbox.ErrNoKey for any other record without a key.
func MessageOf(rec *kgo.Record) (inbox.Message, error) {
	var m inbox.Message
	var outbox string
	for _, h := range rec.Headers {
		switch h.Key {
		case HeaderKey:
			m.Key = string(h.Value)
		case HeaderOutbox:
			outbox = string(h.Value)
		case HeaderID:
			m.Seq, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	if m.Key == "" {
		if key, ok := cloudEventKey(rec); ok {
			return inbox.Message{Key: key}, nil
		}
		return m, fmt.Errorf("kafka: record %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, inbox.ErrNoKey)
	}
	if m.Seq > 0 {
		m.Group = inbox.GroupOf(outbox, string(rec.Key))
	}
	return m, nil
}

// HandleRecord runs the handler for rec in a transaction that claims its key first, and
// commits it. It returns inbox.Duplicate without running the handler for a record
// already handled, the handler's error (wrapped) after rolling back, or the outcome
// after the commit. A record without a key goes to ConsumerConfig.OnForeign instead:
// HandleRecord returns inbox.Foreign when the policy returns nil, or the policy's error.
// It commits no offset: Run does, or you do after it returns nil.
func (c *Consumer) HandleRecord(ctx context.Context, rec *kgo.Record) (inbox.Outcome, error) {
	m, err := MessageOf(rec)
	if errors.Is(err, inbox.ErrNoKey) {
		return c.foreign(ctx, rec, err)
	}
	if err != nil {
		return 0, err
	}
	return c.cfg.Inbox.Handle(ctx, c.cfg.Name, m, func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
		return c.cfg.Handler(ctx, tx, rec, o)
	})
}

// foreign hands a record without a key to the OnForeign policy.
func (c *Consumer) foreign(ctx context.Context, rec *kgo.Record, noKey error) (inbox.Outcome, error) {
	hdr := make(map[string]string, len(rec.Headers))
	for _, h := range rec.Headers {
		hdr[h.Key] = string(h.Value)
	}
	err := c.cfg.OnForeign(ctx, inbox.ForeignMessage{
		Consumer: c.cfg.Name,
		ID:       fmt.Sprintf("%s/%d@%d", rec.Topic, rec.Partition, rec.Offset),
		Payload:  rec.Value, Headers: hdr, Raw: rec, Err: noKey,
	})
	if err != nil {
		return 0, err
	}
	return inbox.Foreign, nil
}

// Run polls the client and handles each fetched record with HandleRecord, in order per
// partition, then commits the offsets of the handled records (and of the foreign ones
// that ConsumerConfig.OnForeign skipped); it returns nil when ctx ends. When a record
// fails (the handler's error, the OnForeign policy's error, a database error), Run commits the offsets of the records handled before it and returns the
// error: the failed record's offset is not committed, so the group's next consumer
// (this one restarted: close the client and build another) receives it again, and the
// inbox reports any record of the same fetch that was already handled as a duplicate.
// A failed offset commit is returned too; the records then come again and are skipped.
//
// With kgo.BlockRebalanceOnPoll, Run allows the rebalance after each fetch's commit.
func (c *Consumer) Run(ctx context.Context) error {
	for {
		fs := c.cfg.Client.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if fs.IsClientClosed() {
			return fmt.Errorf("kafka: consumer %q: %w", c.cfg.Name, kgo.ErrClientClosed)
		}
		var done []*kgo.Record
		var failed error
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, rec := range p.Records {
				if failed != nil {
					return
				}
				if _, err := c.HandleRecord(ctx, rec); err != nil {
					failed = fmt.Errorf("kafka: consumer %q: record %s/%d@%d: %w", c.cfg.Name, rec.Topic, rec.Partition, rec.Offset, err)
					return
				}
				done = append(done, rec)
			}
		})
		if len(done) > 0 {
			if err := c.cfg.Client.CommitRecords(ctx, done...); err != nil && ctx.Err() == nil {
				return errors.Join(failed, fmt.Errorf("kafka: consumer %q: committing offsets: %w", c.cfg.Name, err))
			}
		}
		c.cfg.Client.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
		if failed != nil {
			return failed
		}
	}
}
