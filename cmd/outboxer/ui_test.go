package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/dbtest"
)

var servingRE = regexp.MustCompile(`serving the .* on (http://\S+/)`)

// startUI runs outboxer ui with args (on 127.0.0.1:0 unless they name another --listen)
// and returns its URL and what it wrote to stderr up to the line saying so; the process is
// interrupted at the end of the test, and must then exit 0.
func startUI(t *testing.T, env []string, args ...string) (url, said string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, binary, append([]string{"ui", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("outboxer ui did not stop cleanly on an interrupt: %v", err)
		}
	})
	var out strings.Builder
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		if m := servingRE.FindStringSubmatch(lines.Text()); m != nil {
			go io.Copy(io.Discard, stderr)
			return m[1], out.String()
		}
	}
	t.Fatalf("outboxer ui did not say where it serves:\n%s", out.String())
	return "", ""
}

func TestUIServesTheDashboard(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		s := seed(t, db)
		base, _ := startUI(t, []string{"OUTBOXER_UI_BASIC_AUTH=ops:s3cret"}, "--dsn", s.dsn, "--read-only")
		if !strings.HasPrefix(base, "http://127.0.0.1:") {
			t.Fatalf("serving on %s, want loopback", base)
		}
		get := func(user, pass string) (int, string) {
			req, _ := http.NewRequest(http.MethodGet, base, nil)
			if user != "" {
				req.SetBasicAuth(user, pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, _ := get("", ""); code != http.StatusUnauthorized {
			t.Fatalf("without credentials: %d, want 401", code)
		}
		if code, _ := get("ops", "wrong"); code != http.StatusUnauthorized {
			t.Fatalf("with a wrong password: %d, want 401", code)
		}
		code, body := get("ops", "s3cret")
		if code != http.StatusOK || !strings.Contains(body, `o=orders">orders</a>`) || !strings.Contains(body, `o=emails">emails</a>`) ||
			!strings.Contains(body, `state=dead">2</a>`) || !strings.Contains(body, `id="read-only"`) {
			t.Fatalf("the overview: %d\n%s", code, body)
		}
		form := url.Values{"i": {"x"}, "o": {"orders"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}}
		req, _ := http.NewRequest(http.MethodPost, base+"do", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("ops", "s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a POST to a read-only dashboard: %d, want 403", resp.StatusCode)
		}
	})
}

func TestUIRefusesBadFlags(t *testing.T) {
	wantFailure(t, cli(t, "", "ui", "--dsn", "x.db", "--basic-auth", "nopassword"), exitUsage, "--basic-auth wants user:password")
	wantFailure(t, cli(t, "", "ui", "--dsn", "x.db", "--table", "bad-name"), exitUsage, "invalid --table")
	wantFailure(t, cli(t, "", "ui", "--dsn", "x.db", "extra"), exitUsage, "ui takes no arguments")
}

// Behind a proxy that terminates TLS the dashboard sees plain HTTP: --secure-cookie is
// what keeps the browser from sending its CSRF cookie over an unencrypted connection.
func TestUISecureCookie(t *testing.T) {
	s := seed(t, dbtest.SQLite(t))
	cookie := func(base string) *http.Cookie {
		t.Helper()
		resp, err := http.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Value != "" {
				return c
			}
		}
		t.Fatalf("%s set no cookie (status %d)", base, resp.StatusCode)
		return nil
	}
	plain, _ := startUI(t, nil, "--dsn", s.dsn)
	if c := cookie(plain); c.Secure || !c.HttpOnly {
		t.Fatalf("without --secure-cookie: %+v, want HttpOnly and not Secure", c)
	}
	secure, _ := startUI(t, nil, "--dsn", s.dsn, "--secure-cookie")
	if c := cookie(secure); !c.Secure || !c.HttpOnly {
		t.Fatalf("with --secure-cookie: %+v, want Secure and HttpOnly", c)
	}
}
