package watermillsink

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/outboxer-go/outboxer/core"
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
	// PublishBatchSize is how many consecutive messages with the same topic the sink may
	// hand to one Publish call. With the default, 1, every message is its own call and a
	// failure is reported for exactly the message that failed and the ones after it.
	// With more, a failed call fails its whole run (the publisher does not say which of
	// its messages went out), so messages of that run that did go out are delivered
	// again on the retry, with the same UUID. Larger runs save round trips on
	// publishers that batch (AMQP transactions, Kafka); a PerMessagePublisher is always
	// called with runs of this size and reports per message.
	PublishBatchSize int
}

// Sink is a core.Relay that publishes each envelope as a Watermill message.
type Sink struct {
	pub       message.Publisher
	each      PerMessagePublisher // pub, when it can report per message
	topic     string
	topicFunc func(core.Envelope) string
	table     string
	runSize   int
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
	if opts.PublishBatchSize < 0 {
		return nil, fmt.Errorf("watermillsink: Options.PublishBatchSize is %d; it must be 0 (default 1) or more", opts.PublishBatchSize)
	}
	s := &Sink{
		pub:       pub,
		topic:     opts.Topic,
		topicFunc: opts.TopicFunc,
		table:     opts.Table,
		runSize:   max(opts.PublishBatchSize, 1),
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
func (s *Sink) Message(env core.Envelope) *message.Message {
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

// ErrEarlierFailed is the failure reported for a message that was not published because
// a message before it in the batch failed. It is retryable.
var ErrEarlierFailed = errors.New("watermillsink: not published: an earlier message of the batch failed")

// Deliver publishes batch in order, one message per Publish call (or runs of up to
// PublishBatchSize). When a publish fails, the rest of the batch is not published and
// the result is a *core.PartialFailure naming the failed message and every one after
// it; with a PerMessagePublisher it names what the publisher reported. Deliver stops
// when ctx is done; ctx also becomes each message's context, which publishers that do
// network I/O honour.
func (s *Sink) Deliver(ctx context.Context, batch []core.Envelope) error {
	var failed map[int64]error
	failFrom := func(i int, err error) {
		if failed == nil {
			failed = make(map[int64]error, len(batch)-i)
		}
		failed[batch[i].ID] = err
		for _, env := range batch[i+1:] {
			if _, ok := failed[env.ID]; !ok {
				failed[env.ID] = ErrEarlierFailed
			}
		}
	}
	for i := 0; i < len(batch); {
		if err := ctx.Err(); err != nil {
			failFrom(i, fmt.Errorf("watermillsink: %w", err))
			break
		}
		topic := s.topicOf(batch[i])
		if topic == "" {
			failFrom(i, core.Permanent(fmt.Errorf("%w %d", ErrNoTopic, batch[i].ID)))
			break
		}
		// A run: consecutive messages with the same topic, at most runSize.
		j := i + 1
		for j < len(batch) && j-i < s.runSize && s.topicOf(batch[j]) == topic {
			j++
		}
		msgs := make([]*message.Message, j-i)
		for k := range msgs {
			msgs[k] = s.Message(batch[i+k])
			msgs[k].SetContext(ctx)
		}
		if s.each != nil {
			errs := s.each.PublishEach(topic, msgs...)
			if len(errs) == 0 || errors.Join(errs...) == nil {
				i = j
				continue
			}
			if len(errs) != len(msgs) {
				failFrom(i, fmt.Errorf("watermillsink: publish to %q: publisher reported %d results for %d messages: %w",
					topic, len(errs), len(msgs), errors.Join(errs...)))
				break
			}
			// The publisher said which messages failed: the others of the run went out.
			// Nothing after the run is published, so a group's order at the broker breaks
			// at most within this run.
			failed = make(map[int64]error, len(batch)-i)
			for k, err := range errs {
				if err != nil {
					failed[batch[i+k].ID] = fmt.Errorf("watermillsink: publish to %q: %w", topic, err)
				}
			}
			if j < len(batch) {
				failFrom(j, ErrEarlierFailed)
			}
			break
		} else if err := s.pub.Publish(topic, msgs...); err != nil {
			failFrom(i, fmt.Errorf("watermillsink: publish to %q: %w", topic, err))
			break
		}
		i = j
	}
	if failed != nil {
		return &core.PartialFailure{Failed: failed}
	}
	return nil
}

func (s *Sink) topicOf(env core.Envelope) string {
	if s.topicFunc != nil {
		return s.topicFunc(env)
	}
	return s.topic
}
