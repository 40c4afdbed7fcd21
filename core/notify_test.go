package core

import "testing"

func TestSplitPayload(t *testing.T) {
	for _, c := range []struct{ payload, name, parts string }{
		{"orders:0,2", "orders", "0,2"},
		{"orders", "orders", ""},
		{"a:b:3", "a:b", "3"},   // the name holds the separator
		{"a:b", "a:b", ""},      // what follows the colon is no partition list
		{"a::1,2", "a:", "1,2"}, // a name ending in a colon
		{"", "", ""},
	} {
		name, parts := splitPayload(c.payload)
		if name != c.name || parts != c.parts {
			t.Errorf("splitPayload(%q) = %q, %q; want %q, %q", c.payload, name, parts, c.name, c.parts)
		}
	}
	// A payload the publisher writes always splits back into what it was made of.
	for _, outbox := range []string{"orders", "a:b", "x:1", ":", "a:1,2"} {
		p := notifyPayload([]row{{env: &Envelope{Outbox: outbox, Partition: 1}}, {env: &Envelope{Outbox: outbox, Partition: 3}}})
		if name, parts := splitPayload(p); name != outbox || parts != "1,3" {
			t.Errorf("outbox %q: payload %q splits into %q, %q", outbox, p, name, parts)
		}
	}
}
