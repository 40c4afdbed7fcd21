package dbtime

import (
	"testing"
	"time"
)

func TestScan(t *testing.T) {
	want := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	us := want.UnixMicro()
	for _, v := range []any{want, us, float64(us), []byte("1767323045000006"), "1767323045000006", "1767323045000006.0000"} {
		var got Time
		if err := got.Scan(v); err != nil {
			t.Fatalf("Scan(%#v): %v", v, err)
		}
		if !got.Equal(want) {
			t.Errorf("Scan(%#v) = %v, want %v", v, got.Time, want)
		}
	}
	got := Time{want}
	if err := got.Scan(nil); err != nil || !got.IsZero() {
		t.Errorf("Scan(nil) = %v, %v; want the zero time", got.Time, err)
	}
	for _, v := range []any{"soon", []byte("1.2.3"), true} {
		if err := got.Scan(v); err == nil {
			t.Errorf("Scan(%#v): no error", v)
		}
	}
}
