package cloudevents

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"traceparent", "a", "x9", strings.Repeat("a", MaxExtensionNameLength)} {
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "Trace", "trace-id", "ce_id", "id", "source", "data", "partitionkey",
		strings.Repeat("a", MaxExtensionNameLength+1), "ü", "a b"} {
		if err := CheckName(name); !errors.Is(err, ErrNotCloudEvent) {
			t.Errorf("CheckName(%q): %v, want ErrNotCloudEvent", name, err)
		}
	}
}

func TestNewAndJSON(t *testing.T) {
	t.Parallel()
	o := Options{Source: "/s"}
	if err := o.Check("CloudEvents"); err != nil || o.DataContentType != DefaultDataContentType {
		t.Fatalf("Check: %v, %+v", err, o)
	}
	env := core.Envelope{ID: 3, Type: "t", GroupKey: "g", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC),
		Payload: []byte(`{ "a" : 1 }`), Headers: map[string]string{"zz": "<&>", "aa": "1"}}
	ev, err := New(o, env, "k", true)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"specversion":"1.0","id":"k","source":"/s","type":"t","subject":"g","time":"2026-01-02T03:04:05.000006Z",` +
		`"aa":"1","partitionkey":"g","zz":"\u003c\u0026\u003e","datacontenttype":"application/json","data":{"a":1}}`
	if got := string(ev.JSON()); got != want {
		t.Errorf("JSON:\n%s\nwant\n%s", got, want)
	}
	env.Payload = []byte{0xff}
	ev, _ = New(o, env, "k", false)
	if got := string(ev.JSON()); !strings.Contains(got, `"data_base64":"/w=="`) || strings.Contains(got, "partitionkey") {
		t.Errorf("JSON of a binary payload without the partition key: %s", got)
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	const u = "0B9F5A4E-3C1D-4E8A-9F00-6D7C5B4A3E21"
	if Key("/a", u) != strings.ToLower(u) || Key("/b", u) != Key("/a", u) {
		t.Errorf("a UUID id is its own key, whatever the source")
	}
	if Key("/a", "1") == Key("/b", "1") || Key("/a", "1") != Key("/a", "1") || Key("/a", "1x") == Key("/a1", "x") {
		t.Errorf("other ids are keyed with their source")
	}
	if n := len(Key(strings.Repeat("s", 1000), strings.Repeat("i", 1000))); n > 70 {
		t.Errorf("key of %d characters", n)
	}
	hdr := map[string]string{"cloudEvents:specversion": "1.0", "cloudEvents:id": "1", "cloudEvents:source": "/a"}
	get := func(n string) (string, bool) { v, ok := hdr[n]; return v, ok }
	if k, ok := KeyOf(get, "", nil); !ok || k != Key("/a", "1") {
		t.Errorf("KeyOf AMQP headers: %q %v", k, ok)
	}
	none := func(string) (string, bool) { return "", false }
	if k, ok := KeyOf(none, StructuredContentType+"; charset=utf-8", []byte(`{"specversion":"1.0","id":"1","source":"/a"}`)); !ok || k != Key("/a", "1") {
		t.Errorf("KeyOf structured: %q %v", k, ok)
	}
	for _, body := range []string{`{"id":"1","source":"/a"}`, `{"specversion":"1.0","id":" ","source":"/a"}`, `not json`} {
		if _, ok := KeyOf(none, StructuredContentType, []byte(body)); ok {
			t.Errorf("KeyOf(%s) found a key", body)
		}
	}
	if _, ok := KeyOf(none, "application/json", []byte(`{"specversion":"1.0","id":"1","source":"/a"}`)); ok {
		t.Errorf("KeyOf took a JSON payload for an event")
	}
}
