package outboxerui

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAttackPreviewCutsOnCharacters: a preview cut inside a character shows the text
// before it; a whole payload that ends with half a character is binary, shown as hex.
func TestAttackPreviewCutsOnCharacters(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		size int64
		want string
	}{
		{[]byte("a" + strings.Repeat("é", 39) + "\xc3"), 200, "a" + strings.Repeat("é", 29) + "…"},
		{[]byte("ab\xe2\x82"), 100, "ab"},
		{[]byte("ab\xe2\x82"), 4, "6162e282"},
		{[]byte("x\xff"), 100, "78ff"},
		{[]byte(strings.Repeat("€", 26)), 100, strings.Repeat("€", 20) + "…"},
	} {
		got := preview(c.b, c.size)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("preview(%q, %d) = %q, want %q", c.b, c.size, got, c.want)
		}
	}
	big := []byte("a" + strings.Repeat("€", shownPayload/3+10))
	if kind, body, cut := formatPayload(big); kind != "text" || !cut || !utf8.ValidString(body) || len(body) > shownPayload {
		t.Errorf("a text payload over the limit cut inside a character: %s, %d bytes, cut %v", kind, len(body), cut)
	}
}
