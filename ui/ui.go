package outboxerui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/outboxer-go/outboxer/core"
)

// Defaults of Config.
const (
	DefaultPageSize        = 50
	DefaultBatchSize       = 500
	DefaultRefreshInterval = 10 * time.Second
)

// Config configures the dashboard.
type Config struct {
	// Instances are the outbox tables shown: one per database, or per schema or table of
	// a database. At least one.
	Instances []Instance
	// ReadOnly hides every action, and the server refuses every POST with 403.
	ReadOnly bool
	// PageSize is the number of messages a list shows per page (DefaultPageSize when 0).
	PageSize int
	// BatchSize bounds the messages a bulk action changes per statement and transaction
	// (DefaultBatchSize when 0).
	BatchSize int
	// RefreshInterval is how often the overview and outbox pages reload themselves
	// (DefaultRefreshInterval when 0; negative: never).
	RefreshInterval time.Duration
	// CSRFKey signs the CSRF tokens. When empty, New draws a random key: tokens then
	// stay valid for the life of the handler, on this process only. Set the same key
	// (at least 32 bytes) on every replica behind a load balancer.
	CSRFKey []byte
	// SecureCookie marks the CSRF cookie Secure on every response, so that browsers
	// send it over HTTPS only. Set it when the dashboard is reached over HTTPS through
	// a proxy that terminates TLS: the handler then sees plain HTTP and cannot tell.
	// When false (the default, which keeps a plain-HTTP dashboard on loopback working),
	// the cookie is Secure only on requests that reached this server over TLS.
	SecureCookie bool
}

// Instance is one outbox table.
type Instance struct {
	// Name labels the instance on the pages and in their links; unique. Optional when
	// there is one instance ("default").
	Name string
	DB   *sql.DB
	// Dialect of DB; detected from its driver when empty (core.DetectDialect).
	Dialect core.Dialect
	// Table and Schema as in core.Config (core.DefaultTable when Table is empty; Schema
	// is for PostgreSQL only).
	Table, Schema string
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ConfigError is an invalid Config, as New returns it.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "outboxerui: invalid " + e.Field + ": " + e.Reason }

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

type handler struct {
	cfg       Config
	stores    []*store
	byName    map[string]*store
	csrfKey   []byte
	pages     map[string]*template.Template
	refreshed int // seconds
}

// New returns the dashboard's handler. It checks the configuration and touches no
// database: a database that is down shows as an error on the pages.
func New(cfg Config) (http.Handler, error) {
	if len(cfg.Instances) == 0 {
		return nil, &ConfigError{Field: "Instances", Reason: "at least one instance is needed"}
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.PageSize < 1 || cfg.PageSize > 1000 {
		return nil, &ConfigError{Field: "PageSize", Reason: fmt.Sprintf("%d is not within 1..1000", cfg.PageSize)}
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.BatchSize < 1 || cfg.BatchSize > 10000 {
		return nil, &ConfigError{Field: "BatchSize", Reason: fmt.Sprintf("%d is not within 1..10000", cfg.BatchSize)}
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	h := &handler{cfg: cfg, byName: map[string]*store{}}
	if cfg.RefreshInterval > 0 {
		h.refreshed = max(int(cfg.RefreshInterval/time.Second), 1)
	}
	for i, in := range cfg.Instances {
		field := fmt.Sprintf("Instances[%d]", i)
		if in.DB == nil {
			return nil, &ConfigError{Field: field + ".DB", Reason: "nil"}
		}
		if in.Name == "" {
			if len(cfg.Instances) > 1 {
				return nil, &ConfigError{Field: field + ".Name", Reason: "empty: name each of several instances"}
			}
			in.Name = "default"
		}
		if _, dup := h.byName[in.Name]; dup {
			return nil, &ConfigError{Field: field + ".Name", Reason: fmt.Sprintf("%q names two instances", in.Name)}
		}
		if in.Dialect == "" {
			d, err := core.DetectDialect(in.DB)
			if err != nil {
				return nil, &ConfigError{Field: field + ".Dialect", Reason: err.Error()}
			}
			in.Dialect = d
		}
		switch in.Dialect {
		case core.Postgres, core.MySQL, core.SQLite:
		default:
			return nil, &ConfigError{Field: field + ".Dialect", Reason: fmt.Sprintf("unknown dialect %q", in.Dialect)}
		}
		if in.Table == "" {
			in.Table = core.DefaultTable
		}
		if len(in.Table) > core.MaxTableLen || !identRE.MatchString(in.Table) {
			return nil, &ConfigError{Field: field + ".Table", Reason: fmt.Sprintf("%q is not a valid table name (letters, digits, _; at most %d)", in.Table, core.MaxTableLen)}
		}
		if in.Schema != "" {
			if !identRE.MatchString(in.Schema) {
				return nil, &ConfigError{Field: field + ".Schema", Reason: fmt.Sprintf("%q is not a valid schema name", in.Schema)}
			}
			if in.Dialect != core.Postgres {
				return nil, &ConfigError{Field: field + ".Schema", Reason: "a schema is for PostgreSQL only"}
			}
		}
		s := newStore(in)
		h.stores = append(h.stores, s)
		h.byName[in.Name] = s
	}
	switch {
	case len(cfg.CSRFKey) == 0:
		h.csrfKey = make([]byte, 32)
		if _, err := rand.Read(h.csrfKey); err != nil {
			return nil, fmt.Errorf("outboxerui: draw a CSRF key: %w", err)
		}
	case len(cfg.CSRFKey) < 32:
		return nil, &ConfigError{Field: "CSRFKey", Reason: fmt.Sprintf("%d bytes; use at least 32", len(cfg.CSRFKey))}
	default:
		h.csrfKey = append([]byte(nil), cfg.CSRFKey...)
	}
	if err := h.parseTemplates(); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /outbox", h.outbox)
	mux.HandleFunc("GET /messages", h.messages)
	mux.HandleFunc("GET /message", h.message)
	mux.HandleFunc("POST /confirm", h.confirm)
	mux.HandleFunc("POST /do", h.do)
	mux.Handle("GET /static/", http.FileServerFS(staticFS))
	cop := http.NewCrossOriginProtection()
	return h.secure(cop.Handler(mux)), nil
}

// secure sets the headers every response carries, and sends a request to the mount
// point without its trailing slash to the slash, so that relative links resolve.
func (h *handler) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		if r.URL.Path == "" {
			// Mounted with http.StripPrefix("/admin/outbox", …) and asked for
			// /admin/outbox: the pages' relative links need the trailing slash.
			last := r.RequestURI
			if i := strings.IndexAny(last, "?#"); i >= 0 {
				last = last[:i]
			}
			last = last[strings.LastIndex(last, "/")+1:]
			if strings.Contains(last, ":") {
				// A request target like "https:evil.example" (no path): without
				// "./", the location would name a scheme, and another site.
				last = "./" + last
			}
			hd.Set("Location", last+"/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		if r.Method == http.MethodPost && h.cfg.ReadOnly {
			http.Error(w, "read-only dashboard: changes are refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

const csrfCookie = "outboxerui_csrf"

// csrfToken returns the token the forms of the page carry: the HMAC of the browser's
// CSRF cookie, set here when missing.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	var id string
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		id = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
		// Lax, not Strict: a Strict cookie is not sent when the operator follows a link
		// to the dashboard from another site (an alert), so a new one would replace it
		// and the forms of the tabs already open would fail their token. Lax still keeps
		// it off other sites' POSTs, which need the token anyway.
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: id, HttpOnly: true, SameSite: http.SameSiteLaxMode,
			Secure: h.cfg.SecureCookie || r.TLS != nil})
	}
	return h.sign(id)
}

func (h *handler) sign(id string) string {
	m := hmac.New(sha256.New, h.csrfKey)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

var errCSRF = errors.New("missing or invalid CSRF token: reload the page and try again")

// checkCSRF checks the token of a POST against the browser's cookie.
func (h *handler) checkCSRF(r *http.Request) error {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return errCSRF
	}
	if !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(h.sign(c.Value))) {
		return errCSRF
	}
	return nil
}
