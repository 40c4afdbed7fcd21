package watermillsink

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/internal/cloudevents"
)

// Metadata keys the sink sets on every Watermill message, next to the envelope's headers.
// When a header has one of these names, the sink's value wins.
const (
	// MetadataID is the outbox row's ID, in decimal.
	MetadataID = "outboxer_id"
	// MetadataOutbox is the name of the outbox the message was published to.
	MetadataOutbox = "outboxer_outbox"
	// MetadataType is the message type (core.Envelope.Type).
	MetadataType = "outboxer_type"
	// MetadataGroupKey is the group key; absent for unordered messages.
	MetadataGroupKey = "outboxer_group_key"
)

// namespace is the name space of the name-based UUIDs the sink gives messages. It never
// changes: changing it would give a re-delivered message a new UUID.
var namespace = uuid.MustParse("5df72727-aafb-4c80-b648-ab3154b98220")

// MessageUUID returns the UUID the sink gives the message stored with id in table: a
// name-based (SHA-1, version 5) UUID that is the same every time the row is delivered,
// so a consumer can drop a message it has already seen.
func MessageUUID(table string, id int64) string {
	return uuid.NewSHA1(namespace, []byte(table+"/"+strconv.FormatInt(id, 10))).String()
}

// PerMessagePublisher is a message.Publisher that can say which messages of a call
// failed. When the sink's publisher implements it, the sink publishes a whole run of
// messages in one PublishEach call and reports exactly the failed ones.
type PerMessagePublisher interface {
	message.Publisher
	// PublishEach publishes messages in order and returns one error per message (nil
	// for the delivered ones). A nil or empty slice means every message was published.
	PublishEach(topic string, messages ...*message.Message) []error
}

// Options configure a Sink.
type Options struct {
	// Topic is the topic every message is published to. Required unless TopicFunc is set.
	Topic string
	// TopicFunc, when set, chooses the topic per message and Topic is ignored. An empty
	// topic is a permanent failure of that message.
	TopicFunc func(env core.Envelope) string
	// Table is the outbox table the messages come from; it goes into each message's UUID
	// (see MessageUUID). Default core.DefaultTable. Set it when the outbox uses another
	// table, so that two tables never give two messages the same UUID.
	Table string
	// MaxPayloadBytes, when above 0, refuses a message with a longer payload with a
	// permanent error instead of handing it to the publisher: set it to the broker's
	// limit (RabbitMQ's max_message_size, NATS's max_payload) so that an oversized
	// message goes dead at once instead of failing, and holding back the messages after
	// it, on every retry.
	MaxPayloadBytes int
	// PublishBatchSize is how many consecutive messages with the same topic the sink may
	// hand to one Publish call. With the default, 1, every message is its own call and a
	// failure is reported for exactly the message that failed. With more, a failed call
	// fails its whole run (the publisher does not say which of its messages went out),
	// so the messages of that run that did go out are delivered again on the retry, with
	// the same UUIDs. Larger runs save round trips on publishers that batch; a
	// PerMessagePublisher is called with runs of this size and reports per message; its
	// runs hold at most one message of each group key, so that a message it fails never
	// has a later message of its group published before it (its retry would come after).
	PublishBatchSize int
	// CloudEvents, when set, publishes every message as a CloudEvent: in the binary
	// content mode (ce_ metadata) unless it says Structured. See CloudEvents.
	CloudEvents *CloudEvents
}

// Sink is a core.Relay that publishes each envelope as a Watermill message.
type Sink struct {
	pub       message.Publisher
	each      PerMessagePublisher // pub, when it can report per message
	topic     string
	topicFunc func(core.Envelope) string
	table     string
	runSize   int
	maxBytes  int
	ce        *cloudevents.Options // nil: plain messages
}

var _ core.Relay = (*Sink)(nil)

// New returns a Sink publishing to pub. It does not close pub: the caller owns it.
func New(pub message.Publisher, opts Options) (*Sink, error) {
	if pub == nil {
		return nil, fmt.Errorf("watermillsink: publisher is nil")
	}
	if opts.Topic == "" && opts.TopicFunc == nil {
		return nil, fmt.Errorf("watermillsink: Options.Topic or Options.TopicFunc is required")
	}
	if opts.MaxPayloadBytes < 0 {
		return nil, fmt.Errorf("watermillsink: Options.MaxPayloadBytes is %d; it must be 0 (no limit) or more", opts.MaxPayloadBytes)
	}
	if opts.PublishBatchSize < 0 {
		return nil, fmt.Errorf("watermillsink: Options.PublishBatchSize is %d; it must be 0 (default 1) or more", opts.PublishBatchSize)
	}
	ce, err := opts.CloudEvents.options()
	if err != nil {
		return nil, fmt.Errorf("watermillsink: invalid Options.%w", err)
	}
	s := &Sink{
		ce:        ce,
		pub:       pub,
		topic:     opts.Topic,
		topicFunc: opts.TopicFunc,
		table:     opts.Table,
		runSize:   max(opts.PublishBatchSize, 1),
		maxBytes:  opts.MaxPayloadBytes,
	}
	if s.table == "" {
		s.table = core.DefaultTable
	}
	if each, ok := pub.(PerMessagePublisher); ok {
		s.each = each
	}
	return s, nil
}

// Message builds the Watermill message the sink publishes for env: a stable UUID (see
// MessageUUID), the payload as is, and the headers plus the Metadata* keys as metadata.
// With Options.CloudEvents it is env's CloudEvent (see CloudEvents); an envelope that
// cannot be one, which Deliver fails permanently with ErrNotCloudEvent, gets the message
// without CloudEvents.
func (s *Sink) Message(env core.Envelope) *message.Message {
	if s.ce != nil {
		if msg, err := s.cloudEvent(env); err == nil {
			return msg
		}
	}
	msg := message.NewMessage(MessageUUID(s.table, env.ID), env.Payload)
	for k, v := range env.Headers {
		msg.Metadata.Set(k, v)
	}
	msg.Metadata.Set(MetadataID, strconv.FormatInt(env.ID, 10))
	msg.Metadata.Set(MetadataOutbox, env.Outbox)
	msg.Metadata.Set(MetadataType, env.Type)
	if env.GroupKey != "" {
		msg.Metadata.Set(MetadataGroupKey, env.GroupKey)
	} else {
		delete(msg.Metadata, MetadataGroupKey)
	}
	return msg
}

// ErrNoTopic is the (permanent) failure of a message for which TopicFunc returned "".
var ErrNoTopic = errors.New("watermillsink: no topic for message")

// ErrTooLarge is the (permanent) failure of a message whose payload is over
// Options.MaxPayloadBytes.
var ErrTooLarge = errors.New("watermillsink: payload too large")

// ErrEarlierFailed is the failure reported for a message that was not published because
// an earlier message of the batch failed. It matches core.ErrHeldBack, so the engine
// keeps such a message pending without counting an attempt, and hands it again, in
// order, in the next batch.
var ErrEarlierFailed = fmt.Errorf("watermillsink: not published: an earlier message of the batch failed: %w", core.ErrHeldBack)

// Deliver publishes batch in order, one message per Publish call (or runs of up to
// Options.PublishBatchSize consecutive messages with the same topic) and stops at the
// first failure: the result is then a *core.PartialFailure naming the failed message
// (every message of the failed run), with the publisher's error or the sink's permanent
// one, and every later message of the batch, with ErrEarlierFailed. With a
// PerMessagePublisher, the failures of the run are the ones it reported.
//
// When ctx is done, nothing more is published: the messages not yet published are named
// with an error matching both core.ErrHeldBack and ctx's error, or, if nothing was
// published yet, Deliver returns ctx's error (wrapped) for the whole batch. ctx is also
// each message's context, which publishers that do network I/O honour.
func (s *Sink) Deliver(ctx context.Context, batch []core.Envelope) error {
	topics := make([]string, len(batch))
	for i := range batch {
		topics[i] = s.topicOf(batch[i])
	}
	for i := 0; i < len(batch); {
		if err := ctx.Err(); err != nil {
			if i == 0 {
				return fmt.Errorf("watermillsink: nothing published: %w", err)
			}
			return holdBack(map[int64]error{}, batch[i:],
				fmt.Errorf("watermillsink: not published: the delivery ended first: %w: %w", core.ErrHeldBack, err))
		}
		env := &batch[i]
		if err := s.check(env, topics[i]); err != nil {
			return holdBack(map[int64]error{env.ID: err}, batch[i+1:], ErrEarlierFailed)
		}
		// A run: consecutive publishable messages with the same topic, at most runSize.
		// A PerMessagePublisher may publish a run's later messages past a failed one, so
		// its runs hold at most one message of each group: a failure then never lets a
		// later message of its group out before it.
		var groups map[string]bool
		if s.each != nil && s.runSize > 1 {
			groups = map[string]bool{env.GroupKey: true}
		}
		j := i + 1
		for j < len(batch) && j-i < s.runSize && topics[j] == topics[i] && s.check(&batch[j], topics[j]) == nil {
			if groups != nil && batch[j].GroupKey != "" {
				if groups[batch[j].GroupKey] {
					break
				}
				groups[batch[j].GroupKey] = true
			}
			j++
		}
		run := batch[i:j]
		msgs := make([]*message.Message, len(run))
		for k := range run {
			msgs[k] = s.Message(run[k])
			msgs[k].SetContext(ctx)
		}
		if failed := s.publish(topics[i], run, msgs); len(failed) > 0 {
			return holdBack(failed, batch[j:], ErrEarlierFailed)
		}
		i = j
	}
	return nil
}

// publish hands one run to the publisher and returns the failed messages of the run by
// ID: every one of them when the publisher cannot say which failed.
func (s *Sink) publish(topic string, run []core.Envelope, msgs []*message.Message) map[int64]error {
	failed := map[int64]error{}
	failAll := func(err error) {
		for k := range run {
			failed[run[k].ID] = err
		}
	}
	if s.each == nil {
		if err := s.pub.Publish(topic, msgs...); err != nil {
			failAll(fmt.Errorf("watermillsink: publish to %q: %w", topic, err))
		}
		return failed
	}
	errs := s.each.PublishEach(topic, msgs...)
	switch {
	case len(errs) == 0:
	case len(errs) != len(msgs):
		failAll(fmt.Errorf("watermillsink: publish to %q: publisher reported %d results for %d messages: %w",
			topic, len(errs), len(msgs), errors.Join(errs...)))
	default:
		for k, err := range errs {
			if err != nil {
				failed[run[k].ID] = fmt.Errorf("watermillsink: publish to %q: %w", topic, err)
			}
		}
	}
	return failed
}

// holdBack adds the messages of rest to failed with err (one matching core.ErrHeldBack)
// and returns the partial failure.
func holdBack(failed map[int64]error, rest []core.Envelope, err error) error {
	for _, env := range rest {
		failed[env.ID] = err
	}
	return &core.PartialFailure{Failed: failed}
}

// check returns the permanent failure of a message that cannot be published.
func (s *Sink) check(env *core.Envelope, topic string) error {
	if topic == "" {
		return core.Permanent(fmt.Errorf("%w %d", ErrNoTopic, env.ID))
	}
	if s.maxBytes > 0 && len(env.Payload) > s.maxBytes {
		return core.Permanent(fmt.Errorf("%w: message %d has %d bytes, the limit is %d", ErrTooLarge, env.ID, len(env.Payload), s.maxBytes))
	}
	if s.ce != nil {
		ev, err := cloudevents.New(*s.ce, *env, MessageUUID(s.table, env.ID), false)
		if err != nil {
			return core.Permanent(fmt.Errorf("watermillsink: %w", err))
		}
		if s.ce.Structured && s.maxBytes > 0 {
			if n := len(ev.JSON()); n > s.maxBytes {
				return core.Permanent(fmt.Errorf("%w: message %d has %d bytes as a structured CloudEvent, the limit is %d", ErrTooLarge, env.ID, n, s.maxBytes))
			}
		}
	}
	return nil
}

func (s *Sink) topicOf(env core.Envelope) string {
	if s.topicFunc != nil {
		return s.topicFunc(env)
	}
	return s.topic
}
