package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// runUI serves the web dashboard (package outboxerui) over one database until
// interrupted.
func runUI(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "ui")
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (loopback by default: set a routable address only behind auth)")
	auth := fs.String("basic-auth", "", "require HTTP basic authentication, as user:password (default $OUTBOXER_UI_BASIC_AUTH)")
	readOnly := fs.Bool("read-only", false, "show no actions and refuse every change (403)")
	secure := fs.Bool("secure-cookie", false, "mark the CSRF cookie Secure (set it behind a proxy that terminates TLS)")
	pos, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("ui takes no arguments, got %q", pos)
	}
	if *auth == "" {
		*auth = os.Getenv("OUTBOXER_UI_BASIC_AUTH")
	}
	user, pass, hasAuth := strings.Cut(*auth, ":")
	if *auth != "" && (!hasAuth || user == "" || pass == "") {
		return usagef("--basic-auth wants user:password, both non-empty")
	}
	if err := checkNames(fs.table, fs.schema, ""); err != nil {
		return err
	}
	t, err := parseDSN(fs.dsn)
	if err != nil {
		return err
	}
	if err := checkNames(fs.table, fs.schema, t.dialect); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, t, err := open(ctx, fs.dsn, false)
	if err != nil {
		return err
	}
	defer db.Close()
	h, err := outboxerui.New(outboxerui.Config{
		Instances:    []outboxerui.Instance{{Name: t.name, DB: db, Dialect: t.dialect, Table: fs.table, Schema: fs.schema}},
		ReadOnly:     *readOnly,
		SecureCookie: *secure,
	})
	if err != nil {
		return err
	}
	if *auth != "" {
		h = basicAuth(h, user, pass)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", *listen, err)
	}
	if host, _, _ := net.SplitHostPort(ln.Addr().String()); *auth == "" && !net.ParseIP(host).IsLoopback() {
		fmt.Fprintf(e.stderr, "outboxer ui: warning: serving on %s without --basic-auth: anyone who reaches it can retry and discard messages\n", ln.Addr())
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stderr, "outboxer ui: serving the %s on http://%s/\n", t.name, ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// basicAuth requires the user and password on every request.
func basicAuth(next http.Handler, user, pass string) http.Handler {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		if !ok || subtle.ConstantTimeCompare(gotU[:], wantU[:])&subtle.ConstantTimeCompare(gotP[:], wantP[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="outboxer", charset="UTF-8"`)
			// The refusal is not the dashboard's page: it carries a policy too.
			w.Header().Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
