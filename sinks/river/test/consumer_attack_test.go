package riversink_test

// Attacks on the River inbox worker's reading of job metadata.

import (
	"errors"
	"testing"

	"github.com/outboxer-go/outboxer/inbox"
	riversink "github.com/outboxer-go/outboxer/sinks/river"
)

// TestAttackMetadataNamesExact: the metadata names are matched byte for byte. Go's JSON
// decoder would match a struct field case-insensitively (Unicode simple folding: the
// Kelvin sign K is a k), so metadata a user put next to the sink's (River's
// InsertOpts.Metadata, merged into the job's) under "Outboxer-Key" or "outboxer-\u212aey"
// would be read as the key, the last of the two winning, and PostgreSQL's jsonb sorts
// the longer name last. Only the sink's own names count.
func TestAttackMetadataNamesExact(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta string
		want inbox.Message
		err  error
	}{
		{"another case only", `{"Outboxer-Key":"spoof"}`, inbox.Message{}, inbox.ErrNoKey},
		{"Kelvin sign only", `{"outboxer-\u212aey":"spoof"}`, inbox.Message{}, inbox.ErrNoKey},
		{"Kelvin sign last", `{"outboxer-key":"k","outboxer-\u212aey":"spoof"}`, inbox.Message{Key: "k"}, nil},
		{"another case last", `{"outboxer-key":"k","OUTBOXER-KEY":"spoof"}`, inbox.Message{Key: "k"}, nil},
		{"id in another case", `{"outboxer-key":"k","outboxer_id":7,"outboxer_outbox":"o","OUTBOXER_ID":99}`, inbox.Message{Key: "k", Seq: 7, Group: ""}, nil},
		{"group", `{"outboxer-key":"k","outboxer_id":7,"outboxer_outbox":"o","outboxer_group_key":"g","Outboxer_Group_Key":"x"}`, inbox.Message{Key: "k", Seq: 7, Group: inbox.GroupOf("o", "g")}, nil},
		{"null", `null`, inbox.Message{}, inbox.ErrNoKey},
		{"empty", ``, inbox.Message{}, inbox.ErrNoKey},
		{"empty key", `{"outboxer-key":""}`, inbox.Message{}, inbox.ErrNoKey},
		{"null key", `{"outboxer-key":null}`, inbox.Message{}, inbox.ErrNoKey},
	} {
		m, err := riversink.MessageOf([]byte(tc.meta))
		if (tc.err == nil && err != nil) || (tc.err != nil && !errors.Is(err, tc.err)) || m != tc.want {
			t.Errorf("%s: MessageOf(%s) = %+v, %v; want %+v, %v", tc.name, tc.meta, m, err, tc.want, tc.err)
		}
	}
	// Malformed metadata is an error, never a key.
	for _, meta := range []string{`not json`, `[]`, `"k"`, `{"outboxer-key":5}`, `{"outboxer-key":"k","outboxer_id":"7"}`, `{"outboxer-key":"k"`} {
		if m, err := riversink.MessageOf([]byte(meta)); err == nil {
			t.Errorf("MessageOf(%s) = %+v, want an error", meta, m)
		}
	}
}
