package outboxerui

import (
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/core"
)

func TestNewRefusesBadConfig(t *testing.T) {
	db := &sql.DB{} // never used: New touches no database
	in := func(mod func(*Instance)) []Instance {
		i := Instance{Name: "a", DB: db, Dialect: core.Postgres}
		mod(&i)
		return []Instance{i}
	}
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Instances"},
		{Config{Instances: in(func(i *Instance) { i.DB = nil })}, "Instances[0].DB"},
		{Config{Instances: in(func(i *Instance) { i.Table = `x"; DROP TABLE y; --` })}, "Instances[0].Table"},
		{Config{Instances: in(func(i *Instance) { i.Schema = "a b" })}, "Instances[0].Schema"},
		{Config{Instances: in(func(i *Instance) { i.Dialect = core.SQLite; i.Schema = "s" })}, "Instances[0].Schema"},
		{Config{Instances: in(func(i *Instance) { i.Dialect = "oracle" })}, "Instances[0].Dialect"},
		{Config{Instances: append(in(func(*Instance) {}), in(func(*Instance) {})...)}, "Instances[1].Name"},
		{Config{Instances: append(in(func(i *Instance) { i.Name = "" }), in(func(*Instance) {})...)}, "Instances[0].Name"},
		{Config{Instances: in(func(*Instance) {}), PageSize: -1}, "PageSize"},
		{Config{Instances: in(func(*Instance) {}), BatchSize: 20000}, "BatchSize"},
		{Config{Instances: in(func(*Instance) {}), CSRFKey: []byte("short")}, "CSRFKey"},
	} {
		_, err := New(c.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("New(%+v): %v, want an error on %s", c.cfg, err, c.field)
		}
	}
	if _, err := New(Config{Instances: in(func(i *Instance) { i.Name = "" })}); err != nil {
		t.Fatalf("one unnamed instance: %v", err)
	}
}

func TestTraceID(t *testing.T) {
	for in, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01":  "",
		"00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "",
		"": "",
	} {
		if got := traceID(in); got != want {
			t.Errorf("traceID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFormatPayload(t *testing.T) {
	for _, c := range []struct {
		in         []byte
		kind, body string
	}{
		{[]byte(`{"a":[1,2]}`), "JSON", "{\n  \"a\": [\n    1,\n    2\n  ]\n}"},
		{[]byte("plain\ttext\n"), "text", "plain\ttext\n"},
		{[]byte{0, 1, 2}, "binary (hex)", "00000000  00 01 02"},
		{[]byte{0xff, 'a'}, "binary (hex)", "00000000  ff 61"},
	} {
		kind, body, cut := formatPayload(c.in)
		if kind != c.kind || !strings.HasPrefix(body, c.body) || cut {
			t.Errorf("formatPayload(%q) = %s %q %v, want %s %q", c.in, kind, body, cut, c.kind, c.body)
		}
	}
	big := []byte(strings.Repeat("x", shownPayload+10))
	if kind, body, cut := formatPayload(big); kind != "text" || len(body) != shownPayload || !cut {
		t.Errorf("a payload over the limit: %s, %d bytes, cut %v", kind, len(body), cut)
	}
}

func TestLikeEscape(t *testing.T) {
	if got := likeEscape("100%_!x"); got != "100!%!_!!x" {
		t.Fatalf("likeEscape: %q", got)
	}
}

func TestLinkKeepsNamesThatLookLikeZero(t *testing.T) {
	if got := link("outbox", "i", "main", "o", "0", "after", int64(0), "group", ""); got != "outbox?i=main&o=0" {
		t.Fatalf("link: %q", got)
	}
}

// TestSecureCookie checks when the CSRF cookie is Secure: on a request over TLS, and on
// every request with Config.SecureCookie (a dashboard behind a proxy that terminates TLS
// sees plain HTTP).
func TestSecureCookie(t *testing.T) {
	db := &sql.DB{} // never used: the page asked for names no instance
	for _, c := range []struct {
		secureCookie bool
		url          string
		want         bool
	}{
		{false, "http://dash.test/messages?i=none", false},
		{false, "https://dash.test/messages?i=none", true},
		{true, "http://dash.test/messages?i=none", true},
		{true, "https://dash.test/messages?i=none", true},
	} {
		h, err := New(Config{Instances: []Instance{{Name: "a", DB: db, Dialect: core.Postgres}}, SecureCookie: c.secureCookie})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.url, nil))
		if rec.Code != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404 (no such instance)", c.url, rec.Code)
		}
		cookies := rec.Result().Cookies()
		if len(cookies) != 1 || cookies[0].Name != csrfCookie {
			t.Fatalf("GET %s: cookies %v, want the CSRF cookie", c.url, cookies)
		}
		if cookies[0].Secure != c.want || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode {
			t.Errorf("SecureCookie %v, GET %s: cookie %+v, want Secure %v, HttpOnly, SameSite=Lax", c.secureCookie, c.url, cookies[0], c.want)
		}
	}
}
