package watermillsink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/inbox"
)

// MessageOf returns what the inbox needs of a message published by the sink: its key
// and, for the stale check, its group (the outbox and MetadataGroupKey, see
// inbox.GroupOf) and position (MetadataID). For a message the sink published (it
// carries MetadataID) the key is its UUID, which the sink derives from the row
// (MessageUUID, the same as core.MessageKey for the empty source); for another
// message, its core.HeaderKey metadata (a Kafka record of the Kafka sink read through
// Watermill, say). The UUID comes first because the sink copies the envelope's headers
// into the metadata: an envelope whose headers carry the key of the message its
// publisher was handling (headers forwarded whole) would otherwise be taken for that
// message. A message with neither that is a CloudEvent, whichever producer wrote it
// (binary mode metadata under ce_, ce-, cloudEvents: or cloudEvents_, or the structured
// mode's JSON event as the payload with a content-type metadata), is keyed on its id:
// the id itself when it is a UUID, or else a hash of its source and id (ids are unique
// per source); it has no stale check. It returns an error matching inbox.ErrNoKey for a
// message that carries none of these (one the sink did not publish: its UUID says
// nothing of a redelivery).
func MessageOf(msg *message.Message) (inbox.Message, error) {
	var m inbox.Message
	id, idErr := strconv.ParseInt(msg.Metadata.Get(MetadataID), 10, 64)
	switch {
	case idErr == nil && msg.UUID != "":
		m.Key = msg.UUID
	case msg.Metadata.Get(core.HeaderKey) != "":
		m.Key = msg.Metadata.Get(core.HeaderKey)
	default:
		if key, ok := cloudEventKey(msg); ok {
			return inbox.Message{Key: key}, nil
		}
		return m, fmt.Errorf("watermillsink: message %s: %w (and no %s)", msg.UUID, inbox.ErrNoKey, MetadataID)
	}
	if idErr == nil {
		m.Seq = id
		m.Group = inbox.GroupOf(msg.Metadata.Get(MetadataOutbox), msg.Metadata.Get(MetadataGroupKey))
	}
	return m, nil
}

// ConsumerOption configures Middleware; Middleware ignores a nil one.
type ConsumerOption func(*consumerOptions)

type consumerOptions struct {
	onForeign inbox.ForeignPolicy
}

// OnForeign sets what Middleware does with a message without a key (see Middleware);
// nil keeps the default, inbox.SkipForeign with the inbox's logger.
func OnForeign(p inbox.ForeignPolicy) ConsumerOption {
	return func(o *consumerOptions) { o.onForeign = p }
}

type consumerTxKey struct{}

type consumerTx struct {
	tx *sql.Tx
	o  inbox.Outcome
}

// Middleware returns a router middleware that runs the handler inside a database
// transaction on in's Config.DB that first claims the message's key (MessageOf) for
// consumer. The handler gets the transaction from the message with Tx and does its
// writes there; when it returns nil the transaction commits, and only then does the
// router acknowledge the message (and publish what the handler produced). When it
// returns an error the transaction rolls back, the error goes up the chain and the
// message is nacked, so the broker delivers it again. A message already handled (a
// duplicate: the relay or the broker delivered it again) is acknowledged without
// running the handler.
//
// A message without a key (one no outboxer sink published: MessageOf returns an error
// matching inbox.ErrNoKey) does not reach the handler either: the OnForeign option, an
// inbox.ForeignPolicy, decides. When it returns nil the message is acknowledged (the
// middleware returns no error and no messages); when it returns an error the middleware
// returns it, and the router nacks the message, as after any failure (the broker
// delivers it again: put middleware.PoisonQueue before this middleware to move it
// aside after some attempts). By default (inbox.SkipForeign with in's logger) it is
// acknowledged with a warning; inbox.StopOnForeign refuses it with an error matching
// inbox.ErrNoKey.
//
// Add it after middlewares that retry (middleware.Retry), so that each attempt runs in
// a transaction of its own, and after those that must see every delivery. A message
// the handler receives is in the inbox's transaction for as long as the handler runs:
// keep slow calls out of it, or they hold the claim's lock (and, on SQLite, the
// database's one writer) that long.
func Middleware(in *inbox.Inbox, consumer string, opts ...ConsumerOption) message.HandlerMiddleware {
	var o consumerOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.onForeign == nil {
		o.onForeign = inbox.SkipForeign(in.Logger())
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			m, err := MessageOf(msg)
			if errors.Is(err, inbox.ErrNoKey) {
				return nil, o.onForeign(msg.Context(), inbox.ForeignMessage{Consumer: consumer, ID: msg.UUID,
					Payload: msg.Payload, Headers: maps.Clone(map[string]string(msg.Metadata)), Raw: msg, Err: err})
			}
			if err != nil {
				return nil, err
			}
			var produced []*message.Message
			orig := msg.Context()
			o, err := in.Handle(orig, consumer, m, func(ctx context.Context, tx *sql.Tx, o inbox.Outcome) error {
				msg.SetContext(context.WithValue(ctx, consumerTxKey{}, consumerTx{tx: tx, o: o}))
				defer msg.SetContext(orig)
				out, err := h(msg)
				produced = out
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("watermillsink: message %s: %w", msg.UUID, err)
			}
			if o == inbox.Duplicate {
				return nil, nil
			}
			return produced, nil
		}
	}
}

// Tx returns the transaction Middleware runs msg's handler in, and the inbox's outcome
// for it: inbox.Claimed, or inbox.Stale with the inbox's stale check (the handler
// decides, in the transaction, what to do with an older message of a group). It returns
// a nil transaction outside such a handler.
func Tx(msg *message.Message) (*sql.Tx, inbox.Outcome) {
	c, _ := msg.Context().Value(consumerTxKey{}).(consumerTx)
	return c.tx, c.o
}
