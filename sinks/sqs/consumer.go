package sqs

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxer-go/outboxer/inbox"
)

// MessageHandler does a message's work in the consumer's database transaction tx,
// after the inbox claimed the message's key there. o is inbox.Claimed, or inbox.Stale
// with the inbox's stale check. Returning an error rolls back its writes and the claim,
// and the message is not deleted: SQS delivers it again after its visibility timeout.
type MessageHandler func(ctx context.Context, tx *sql.Tx, m types.Message, o inbox.Outcome) error

// ConsumerConfig configures a Consumer. Client, QueueURL, Inbox, Name and Handler are
// required.
type ConsumerConfig struct {
	// Client receives and deletes the messages.
	Client *sqs.Client
	// QueueURL of the queue to consume.
	QueueURL string
	// Inbox records the messages' keys in the handler's transactions; its Config.DB is
	// where those transactions run. Its window must cover the queue's redelivery bound:
	// check it with CheckRedelivery(inbox, visibility timeout, max receives).
	Inbox *inbox.Inbox
	// Name is the consumer's name in the inbox.
	Name string
	// Handler does each message's work.
	Handler MessageHandler
	// WaitTime is Run's long poll (at most 20 s); default 10 s.
	WaitTime time.Duration
	// Logger receives Run's failures (a message that failed stays in the queue and comes
	// again). Default slog.Default().
	Logger *slog.Logger
	// OnForeign decides what becomes of a message without a key (AttrKey), one that no
	// outboxer sink sent (another producer on the queue): when it returns nil the
	// message is deleted without running the handler (HandleMessage returns
	// inbox.Foreign); when it returns an error the message stays in the queue, and Run
	// returns the error if it matches inbox.ErrNoKey, or logs it as any failure (SQS
	// delivers the message again, and moves it to the dead-letter queue after the
	// redrive policy's maximum receives). Default inbox.SkipForeign(Logger): delete it
	// and log a warning. inbox.StopOnForeign stops Run at it; a function of yours can
	// dead-letter it first (see inbox.ForeignPolicy).
	OnForeign inbox.ForeignPolicy
}

// Consumer handles an SQS queue's messages with an inbox: each message in a database
// transaction that first claims its key (AttrKey), so that a message delivered again
// (by the relay after a crash, or by SQS after the visibility timeout ran out while the
// consumer was slow or dead) does not run the handler a second time; and a message is
// deleted from the queue only after its transaction committed.
type Consumer struct {
	cfg ConsumerConfig
}

// NewConsumer validates cfg and returns a Consumer.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	bad := func(field, reason string) error {
		return fmt.Errorf("sqs: invalid ConsumerConfig.%s: %s", field, reason)
	}
	switch {
	case cfg.Client == nil:
		return nil, bad("Client", "is required")
	case cfg.QueueURL == "":
		return nil, bad("QueueURL", "is required")
	case cfg.Inbox == nil:
		return nil, bad("Inbox", "is required")
	case cfg.Name == "":
		return nil, bad("Name", "is required")
	case cfg.Handler == nil:
		return nil, bad("Handler", "is required")
	case cfg.WaitTime < 0 || cfg.WaitTime > 20*time.Second:
		return nil, bad("WaitTime", fmt.Sprintf("must be between 0 (default 10s) and 20s, got %v", cfg.WaitTime))
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OnForeign == nil {
		cfg.OnForeign = inbox.SkipForeign(cfg.Logger)
	}
	return &Consumer{cfg: cfg}, nil
}

// CheckRedelivery checks that in's window covers how late SQS can deliver a message
// again: visibility × maxReceives (the queue's VisibilityTimeout and its redrive
// policy's maxReceiveCount). It returns an error matching inbox.ErrWindowTooShort.
func CheckRedelivery(in *inbox.Inbox, visibility time.Duration, maxReceives int) error {
	return in.CheckRedelivery("SQS visibility timeout × max receives", visibility*time.Duration(max(maxReceives, 1)))
}

// MessageOf returns what the inbox needs of a message sent by the relay: its key
// (AttrKey) and, for the stale check, its group (the outbox and AttrGroupKey, see
// inbox.GroupOf) and position (AttrID). A message without AttrKey that is a CloudEvent,
// whichever producer sent it (binary mode ce_ attributes, or the structured mode's JSON
// event as the body with a content-type attribute), is keyed on its id: the id itself
// when it is a UUID, or else a hash of its source and id (ids are unique per source); it
// has no stale check. It returns an error matching inbox.ErrNoKey for any other message
// without a key.
func MessageOf(m types.Message) (inbox.Message, error) {
	attr := func(name string) string {
		if v, ok := m.MessageAttributes[name]; ok {
			return aws.ToString(v.StringValue)
		}
		return ""
	}
	msg := inbox.Message{Key: attr(AttrKey)}
	if msg.Key == "" {
		if key, ok := cloudEventKey(m); ok {
			return inbox.Message{Key: key}, nil
		}
		return msg, fmt.Errorf("sqs: message %s: %w (receive it with MessageAttributeNames [\"All\"])", aws.ToString(m.MessageId), inbox.ErrNoKey)
	}
	if id, err := strconv.ParseInt(attr(AttrID), 10, 64); err == nil {
		msg.Seq = id
		msg.Group = inbox.GroupOf(attr(AttrOutbox), attr(AttrGroupKey))
	}
	return msg, nil
}

// HandleMessage runs the handler for m in a transaction that claims its key first, and
// after the commit deletes m from the queue. A duplicate is deleted without running the
// handler. On the handler's error it rolls back, leaves m in the queue and returns the
// error (wrapped). If the delete fails after the commit, it returns that error: SQS
// delivers m again, and the inbox reports it as a duplicate. A message without a key
// goes to ConsumerConfig.OnForeign instead: it is deleted, and HandleMessage returns
// inbox.Foreign, when the policy returns nil; it stays, with the policy's error, when
// not.
func (c *Consumer) HandleMessage(ctx context.Context, m types.Message) (inbox.Outcome, error) {
	o, _, err := c.handle(ctx, m)
	return o, err
}

// handle is HandleMessage; foreign reports that m carried no key.
func (c *Consumer) handle(ctx context.Context, m types.Message) (o inbox.Outcome, foreign bool, err error) {
	msg, err := MessageOf(m)
	switch {
	case errors.Is(err, inbox.ErrNoKey):
		if err := c.cfg.OnForeign(ctx, c.foreign(m, err)); err != nil {
			return 0, true, err
		}
		o, foreign = inbox.Foreign, true
	case err != nil:
		return 0, false, err
	default:
		o, err = c.cfg.Inbox.Handle(ctx, c.cfg.Name, msg, func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
			return c.cfg.Handler(ctx, tx, m, o)
		})
		if err != nil {
			return 0, false, fmt.Errorf("sqs: message %s: %w", aws.ToString(m.MessageId), err)
		}
	}
	if _, err := c.cfg.Client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &c.cfg.QueueURL, ReceiptHandle: m.ReceiptHandle}); err != nil {
		return o, foreign, fmt.Errorf("sqs: deleting message %s after handling it: %w", aws.ToString(m.MessageId), err)
	}
	return o, foreign, nil
}

// foreign is what the OnForeign policy receives of m.
func (c *Consumer) foreign(m types.Message, noKey error) inbox.ForeignMessage {
	hdr := make(map[string]string, len(m.MessageAttributes))
	for name, v := range m.MessageAttributes {
		if v.StringValue != nil {
			hdr[name] = *v.StringValue
		}
	}
	return inbox.ForeignMessage{Consumer: c.cfg.Name, ID: aws.ToString(m.MessageId),
		Payload: []byte(aws.ToString(m.Body)), Headers: hdr, Raw: m, Err: noKey}
}

// Run receives messages (up to 10 at a time, long polling WaitTime) and handles each
// with HandleMessage until ctx ends, then returns nil. A message that fails is logged
// and left in the queue: SQS delivers it again after its visibility timeout (and moves
// it to the dead-letter queue after the redrive policy's maximum receives). A message
// without a key whose OnForeign policy returns an error matching inbox.ErrNoKey (as
// inbox.StopOnForeign does) stops Run: it returns the error, and the message, with the
// rest of its receive, comes again after the visibility timeout.
func (c *Consumer) Run(ctx context.Context) error {
	wait := int32(c.cfg.WaitTime / time.Second)
	for ctx.Err() == nil {
		out, err := c.cfg.Client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &c.cfg.QueueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: wait,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			c.cfg.Logger.Error("sqs: receive failed", "queue", c.cfg.QueueURL, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for _, m := range out.Messages {
			_, foreign, err := c.handle(ctx, m)
			if foreign && errors.Is(err, inbox.ErrNoKey) {
				return fmt.Errorf("sqs: consumer %q: %w", c.cfg.Name, err)
			}
			if err != nil && ctx.Err() == nil {
				c.cfg.Logger.Error("sqs: message failed; it stays in the queue", "queue", c.cfg.QueueURL, "consumer", c.cfg.Name, "err", err)
			}
		}
	}
	return nil
}
