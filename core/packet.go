package core

import (
	"context"
	"fmt"
)

// MariaDB and MySQL refuse a client packet larger than max_allowed_packet by closing the
// connection: the statement fails, and so does the next one on that pooled connection. A
// driver that writes the arguments into the statement text (interpolateParams=true) sends
// a PublishAll as one packet, so the engine sizes its INSERTs to fit.

// Bytes a row's text takes in a statement besides its values (placeholders, quotes,
// _binary prefixes, the partition and delay), and the statement's own text, both generous.
const (
	packetRowOverhead       = 256
	packetStatementOverhead = 1024
)

// packetLimit returns the server's max_allowed_packet, read through db the first time and
// kept for the instance's life (the server reads it once per connection too).
func (o *Outboxer) packetLimit(ctx context.Context, db Executor) (int, error) {
	if n := o.packet.Load(); n > 0 {
		return int(n), nil
	}
	var n int64
	err := queryRows(ctx, db, `SELECT @@max_allowed_packet`, nil, func(scan func(...any) error) error {
		return scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("outboxer: publish: read max_allowed_packet: %w", err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("outboxer: publish: max_allowed_packet reads %d", n)
	}
	o.packet.Store(n)
	return int(n), nil
}

// fitPackets sets each row's size in a statement and returns the most a statement may
// hold, or refuses, before anything is sent, a row that cannot fit in any statement.
// Sizes are upper bounds: a value's bytes plus one for each byte the driver may escape.
func (o *Outboxer) fitPackets(ctx context.Context, db Executor, rows []row) (int, error) {
	limit, err := o.packetLimit(ctx, db)
	if err != nil {
		return 0, err
	}
	room := limit - packetStatementOverhead
	// Twice the bytes bounds any escaping: when that fits, no byte needs a look.
	total := 0
	for i := range rows {
		rows[i].size = 2*rawSize(&rows[i]) + packetRowOverhead
		total += rows[i].size
	}
	if total <= room {
		return room, nil
	}
	for i := range rows {
		r := &rows[i]
		r.size = rawSize(r) + escapes(r.env.Outbox) + escapes(r.env.Type) + escapes(r.env.GroupKey) +
			escapes(r.env.Payload) + packetRowOverhead
		if h, ok := r.headers.(string); ok {
			r.size += escapes(h)
		}
		if r.size > room {
			return 0, fmt.Errorf("%w: message %d takes up to %d bytes in a statement, more than the server's max_allowed_packet (%d) allows",
				ErrPayloadTooLarge, i, r.size+packetStatementOverhead, limit)
		}
	}
	return room, nil
}

func rawSize(r *row) int {
	n := len(r.env.Outbox) + len(r.env.Type) + len(r.env.GroupKey) + len(r.env.Payload)
	if h, ok := r.headers.(string); ok {
		n += len(h)
	}
	return n
}

// escapes counts the bytes a MySQL driver escapes with a backslash in a quoted literal.
func escapes[T string | []byte](s T) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case 0, '\n', '\r', '\\', '\'', '"', 0x1a:
			n++
		}
	}
	return n
}
