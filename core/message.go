package core

import (
	"reflect"
	"time"

	"github.com/outboxer-go/outboxer/core/internal/dialect"
)

// Message is something that can be published: a value naming the outbox it goes to.
// The value itself is encoded by the instance's Codec (JSON by default) into the payload.
type Message interface {
	Outbox() string
}

// GroupKeyer is implemented by messages that must stay in order with other messages
// of the same group (usually an aggregate, such as "order:42"). An empty key means the
// message is unordered: it neither blocks nor is blocked.
type GroupKeyer interface {
	GroupKey() string
}

// Headerer is implemented by messages that carry headers of their own. Headers given
// with WithHeaders are merged over them.
type Headerer interface {
	Headers() map[string]string
}

// Typer is implemented by messages that name their own type. Without it the type is the
// Go type as "package.Name"; implement Typer to keep the name stable across refactors.
type Typer interface {
	MessageType() string
}

// State is where a stored message is in its life.
type State int

const (
	// Pending messages wait for delivery (or for their next attempt).
	Pending State = iota
	// Delivered messages were confirmed by the relay; only kept with retention KeepFor.
	Delivered
	// Dead messages failed MaxAttempts times (or permanently) and wait for RetryDead or Discard.
	Dead
)

// StoredPendingStates is the list of the values of the state column that are Pending,
// parenthesised, for SQL of your own over the outbox table (a report, a dashboard):
// "WHERE state IN " + StoredPendingStates. The table stores Delivered and Dead as their
// State values; a pending message is stored as ready (0), waiting for its time (3:
// scheduled, or waiting for a retry) or held behind an earlier message of its group (4),
// so that delivery reads only what can go now.
const StoredPendingStates = dialect.PendingStates

// String returns "pending", "delivered" or "dead".
func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Delivered:
		return "delivered"
	case Dead:
		return "dead"
	}
	return "unknown"
}

// Envelope is a stored message: what Publish returns and what a Relay receives.
type Envelope struct {
	// ID grows with every insert into a table; order within a group is ID order.
	ID          int64
	Outbox      string
	Type        string
	GroupKey    string // "" for unordered messages
	Partition   int
	Payload     []byte
	Headers     map[string]string
	Attempts    int    // failed attempts so far
	LastError   string // the error of the last failed attempt
	State       State
	CreatedAt   time.Time
	AvailableAt time.Time // not delivered before this time (retry backoff or a scheduled message)
}

// Raw is a Message whose payload is already encoded. It is written as is, without the Codec.
// Use it to forward bytes (a protobuf, an Avro record) or to publish without a Go type.
type Raw struct {
	To     string            // the outbox
	Type   string            // stored as the envelope's Type; required
	Key    string            // group key; "" for unordered
	Data   []byte            // the payload
	Header map[string]string // headers
}

// Outbox returns r.To.
func (r Raw) Outbox() string { return r.To }

// GroupKey returns r.Key.
func (r Raw) GroupKey() string { return r.Key }

// MessageType returns r.Type.
func (r Raw) MessageType() string { return r.Type }

// Headers returns r.Header.
func (r Raw) Headers() map[string]string { return r.Header }

// messageType names a message: its MessageType, or the Go type as "package.Name".
func messageType(m Message) string {
	if t, ok := m.(Typer); ok {
		if name := t.MessageType(); name != "" {
			return name
		}
	}
	t := reflect.TypeOf(m)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.String()
}
