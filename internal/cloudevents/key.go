package cloudevents

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"mime"
	"strings"
)

// binaryPrefixes are the attribute name prefixes of the bindings' binary modes: Kafka
// (and this project's sinks), HTTP and NATS, AMQP, and AMQP through JMS-style brokers.
var binaryPrefixes = []string{"ce_", "ce-", "cloudEvents:", "cloudEvents_"}

// Key returns the inbox key of a CloudEvent with id from source: the id itself when it
// is a UUID (ids such as the sinks' message keys, unique whatever their source), or else
// "ce:" and the hex SHA-256 of the pair, since CloudEvents makes an id unique only within
// its source. It is under 70 characters.
func Key(source, id string) string {
	if isUUID(id) {
		return strings.ToLower(id)
	}
	h := sha256.New()
	h.Write([]byte(source))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return "ce:" + hex.EncodeToString(h.Sum(nil))
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'):
		default:
			return false
		}
	}
	return true
}

// KeyOf returns the inbox key (see Key) of a message that is a CloudEvent, whichever
// producer wrote it: in a binary mode, its headers (header returns a header's value by
// name, case-sensitive) hold the specversion, id and source under one of the bindings'
// prefixes; in the structured mode, contentType is the JSON event format's and body is
// an event with an id and a source. It reports false for any other message.
func KeyOf(header func(name string) (string, bool), contentType string, body []byte) (string, bool) {
	for _, p := range binaryPrefixes {
		spec, ok1 := header(p + "specversion")
		id, ok2 := header(p + "id")
		source, ok3 := header(p + "source")
		if ok1 && ok2 && ok3 && spec != "" && strings.TrimSpace(id) != "" && strings.TrimSpace(source) != "" {
			return Key(source, id), true
		}
	}
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != StructuredContentType {
		return "", false
	}
	var ev struct {
		SpecVersion string `json:"specversion"`
		ID          string `json:"id"`
		Source      string `json:"source"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.SpecVersion == "" || strings.TrimSpace(ev.ID) == "" || strings.TrimSpace(ev.Source) == "" {
		return "", false
	}
	return Key(ev.Source, ev.ID), true
}
