package core

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
)

// HeaderKey is the name under which every sink carries a message's key (see MessageKey):
// a Kafka record header, an SQS message attribute and River job metadata. (The Watermill
// sink's message UUID is the key for the empty source.) Consumers deduplicate on it (the
// inbox package does).
const HeaderKey = "outboxer-key"

// keyNamespace is the name space of the name-based UUIDs MessageKey returns. It never
// changes: changing it would give a re-delivered message a new key. (It is the one the
// Watermill sink has always used for its message UUIDs, which are message keys.)
var keyNamespace = [16]byte{0x5d, 0xf7, 0x27, 0x27, 0xaa, 0xfb, 0x4c, 0x80, 0xb6, 0x48, 0xab, 0x31, 0x54, 0xb9, 0x82, 0x20}

// MessageKey returns the key of the message stored with id in table of the database
// source names: a name-based (SHA-1, version 5) UUID in its 36-character text form,
// the same every time the row is delivered, by whichever sink, and different for any
// other row of any table. It is the key consumers deduplicate on: delivery is at least
// once, and a redelivered message carries the same key.
//
// source tells databases apart: give every database whose outboxes reach the same
// consumers its own (its name, say) and keep it for as long as messages can be
// redelivered. With the empty source (the sinks' default), keys are unique across the
// tables of one database only.
func MessageKey(source, table string, id int64) string {
	name := make([]byte, 0, len(source)+len(table)+22)
	if source != "" {
		name = append(append(name, source...), '/')
	}
	name = append(append(name, table...), '/')
	name = strconv.AppendInt(name, id, 10)

	h := sha1.New()
	h.Write(keyNamespace[:])
	h.Write(name)
	var u [20]byte
	h.Sum(u[:0])
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
	return string(b[:])
}

// KeyFromHeaders returns the message key a sink put into headers (HeaderKey), and
// whether there was one. It reads what a consumer collected from a Kafka record's
// headers, an SQS message's string attributes or any other map of the message's
// headers.
func KeyFromHeaders(headers map[string]string) (string, bool) {
	k, ok := headers[HeaderKey]
	return k, ok && k != ""
}
