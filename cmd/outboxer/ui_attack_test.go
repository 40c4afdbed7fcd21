package main

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/dbtest"
)

// TestAttackUIBasicAuth: only the exact user and password pass; near misses, empty
// parts, other schemes and malformed headers get 401 with a challenge, and the handler
// behind is not reached.
func TestAttackUIBasicAuth(t *testing.T) {
	reached := 0
	h := basicAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }), "ops", "s3cret")
	for _, c := range []struct {
		name   string
		header string
	}{
		{"none", ""},
		{"wrong password", basic("ops", "wrong")},
		{"a longer password", basic("ops", "s3cret ")},
		{"a prefix of the password", basic("ops", "s3cre")},
		{"the password in capitals", basic("ops", "S3CRET")},
		{"the user in capitals", basic("OPS", "s3cret")},
		{"user and password swapped", basic("s3cret", "ops")},
		{"an empty password", basic("ops", "")},
		{"an empty user", basic("", "s3cret")},
		{"the password as the user", basic("ops:s3cret", "")},
		{"no colon", "Basic " + b64("opss3cret")},
		{"another scheme", "Bearer " + b64("ops:s3cret")},
		{"not base64", "Basic ops:s3cret"},
		{"NUL after the password", basic("ops", "s3cret\x00")},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized || !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s: %d, challenge %q; want 401 with a Basic challenge", c.name, rec.Code, rec.Header().Get("WWW-Authenticate"))
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s: the 401 has Content-Security-Policy %q", c.name, csp)
		}
	}
	if reached != 0 {
		t.Fatalf("the dashboard was reached %d times without the right credentials", reached)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", basic("ops", "s3cret"))
	h.ServeHTTP(rec, req)
	if reached != 1 {
		t.Fatalf("the right credentials did not reach the dashboard: %d", rec.Code)
	}
}

func basic(user, pass string) string { return "Basic " + b64(user+":"+pass) }

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestAttackUIRefusesEmptyCredentials: basic auth from the flag or the environment
// needs both a user and a password.
func TestAttackUIRefusesEmptyCredentials(t *testing.T) {
	for _, v := range []string{"ops:", ":s3cret", ":", "ops"} {
		wantFailure(t, cli(t, "", "ui", "--dsn", "x.db", "--basic-auth", v), exitUsage, "--basic-auth wants user:password")
	}
	for _, v := range []string{"ops:", ":s3cret", "ops"} {
		t.Setenv("OUTBOXER_UI_BASIC_AUTH", v)
		wantFailure(t, cli(t, "", "ui", "--dsn", "x.db"), exitUsage, "--basic-auth wants user:password")
	}
}

// TestAttackUIListen: a routable address without basic auth is served only with a
// warning on stderr; with basic auth, or on loopback, without one.
func TestAttackUIListen(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		if db.Dialect != "sqlite" {
			t.Skip("the listening address does not depend on the database")
		}
		s := seed(t, db)
		for _, c := range []struct {
			listen, auth string
			warn         bool
		}{
			{"0.0.0.0:0", "", true},
			{"0.0.0.0:0", "ops:s3cret", false},
			{"localhost:0", "", false},
			{"[::1]:0", "", false},
		} {
			_, lines := startUI(t, []string{"OUTBOXER_UI_BASIC_AUTH=" + c.auth}, "--dsn", s.dsn, "--listen", c.listen)
			warned := strings.Contains(lines, "warning: serving on")
			if warned != c.warn {
				t.Errorf("--listen %s, auth %q: warned=%v, want %v\n%s", c.listen, c.auth, warned, c.warn, lines)
			}
		}
	})
}
