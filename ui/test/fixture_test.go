package uitest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// table needs quoting on every dialect: a reserved word, in mixed case.
const table = "Order"

// msg is a message whose payload is given as it is stored.
type msg struct {
	box, typ string
	body     []byte
}

func (m msg) Outbox() string      { return m.box }
func (m msg) MessageType() string { return m.typ }

var rawCodec = core.CodecFunc(func(m core.Message) ([]byte, error) { return m.(msg).body, nil })

// The hostile data of the tests: if any of it executed or was injected, a page is unsafe.
const (
	hostileScript = `<script>alert(1)</script>`
	hostileImg    = `"><img src=x onerror=alert(2)>`
	hostileGroup  = `<script>alert(3)</script>`
	hostileError  = `<img src=x onerror=alert(4)>`
	hostileHeader = `<b onclick=alert(5)>h</b>`
	traceparent   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// relay fails the messages named in failing, with their error.
type relay struct {
	mu      sync.Mutex
	failing map[int64]error
	got     []int64
}

func (r *relay) fail(id int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing[id] = err
}

func (r *relay) heal() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.failing)
}

func (r *relay) Deliver(_ context.Context, batch []core.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	pf := &core.PartialFailure{Failed: map[int64]error{}}
	for _, e := range batch {
		if err, ok := r.failing[e.ID]; ok {
			pf.Failed[e.ID] = err
			continue
		}
		r.got = append(r.got, e.ID)
	}
	if len(pf.Failed) > 0 {
		return pf
	}
	return nil
}

// fixture is a database with two outboxes in known states, and the dashboard over it,
// mounted under /admin/outbox/ as a host application would.
type fixture struct {
	t      *testing.T
	db     *dbtest.DB
	ob     *core.Outboxer
	relay  *relay
	srv    *httptest.Server
	client *http.Client
	base   string // the dashboard's root URL, with its trailing slash
	// IDs of the messages published.
	stuck, held1, held2, flowing int64   // orders: group g1 blocked by stuck; g2 delivered
	dead                         []int64 // mail: dead, hostile payloads
	scheduled                    int64
	stuckSize                    int
	handler                      http.Handler
}

type option func(*outboxerui.Config)

func readOnly(c *outboxerui.Config) { c.ReadOnly = true }
func pageSize(n int) option         { return func(c *outboxerui.Config) { c.PageSize = n } }
func batchSize(n int) option        { return func(c *outboxerui.Config) { c.BatchSize = n } }

func newFixture(t *testing.T, db *dbtest.DB, opts ...option) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, db: db, relay: &relay{failing: map[int64]error{}}}
	long := core.Backoff{Min: time.Hour, Max: time.Hour}
	ob, err := core.New(core.Config{
		DB: db.DB, Dialect: db.Dialect, Table: table, Manual: true, Codec: rawCodec,
		Outboxes: map[string]core.OutboxConfig{
			"orders": {Relay: f.relay, Ordering: core.OrderGroup, Partitions: 2, Backoff: long},
			"mail":   {Relay: f.relay, MaxAttempts: 1, Backoff: long},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f.ob = ob
	publish := func(m msg, opts ...core.PublishOption) int64 {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		env, err := ob.Publish(ctx, tx, m, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return env.ID
	}
	stuckBody := []byte(`{"order":1,"note":"` + strings.ReplaceAll(hostileImg, `"`, `\"`) + `"}`)
	f.stuckSize = len(stuckBody)
	f.stuck = publish(msg{"orders", "order.created", stuckBody},
		core.WithGroupKey("g1"), core.WithHeaders(map[string]string{"traceparent": traceparent, "tenant": "acme"}))
	f.held1 = publish(msg{"orders", "order.paid", []byte(`{"order":1}`)}, core.WithGroupKey("g1"))
	f.held2 = publish(msg{"orders", "order.shipped", []byte(`{"order":1}`)}, core.WithGroupKey("g1"))
	f.flowing = publish(msg{"orders", "order.created", []byte(`{"order":2}`)}, core.WithGroupKey("g2"))
	f.scheduled = publish(msg{"orders", "order.reminder", []byte(`{"order":3}`)}, core.WithGroupKey("g3"), core.WithDelay(time.Hour))
	for _, m := range []struct {
		body  []byte
		group string
		hdr   map[string]string
	}{
		{[]byte(hostileScript), hostileGroup, map[string]string{hostileHeader: hostileHeader, "tenant": "acme"}},
		{[]byte(hostileImg), "", map[string]string{"tenant": "other"}},
		{[]byte{0x00, 0x01, 0xfe, 0xff, '<', 's', '>'}, "", nil},
	} {
		f.dead = append(f.dead, publish(msg{"mail", "mail.send", m.body}, core.WithGroupKey(m.group), core.WithHeaders(m.hdr)))
	}
	f.relay.fail(f.stuck, errors.New("broker said no: "+hostileError))
	for _, id := range f.dead {
		f.relay.fail(id, errors.New("smtp: "+hostileError))
	}
	f.drain("orders")
	f.drain("mail")

	cfg := outboxerui.Config{Instances: []outboxerui.Instance{{Name: "main", DB: db.DB, Dialect: db.Dialect, Table: table}}}
	for _, o := range opts {
		o(&cfg)
	}
	h, err := outboxerui.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.handler = h
	mux := http.NewServeMux()
	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", h))
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	jar, _ := cookiejar.New(nil)
	f.client = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	f.base = f.srv.URL + "/admin/outbox/"
	return f
}

func (f *fixture) drain(outbox string) core.DrainResult {
	f.t.Helper()
	res, err := f.ob.Drain(context.Background(), outbox)
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

func (f *fixture) counts(outbox string) core.Counts {
	f.t.Helper()
	c, err := f.ob.Counts(context.Background(), outbox)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// get fetches a page (a path relative to the dashboard's root) and returns its status
// and body.
func (f *fixture) get(path string) (int, string) {
	f.t.Helper()
	resp, err := f.client.Get(f.base + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (f *fixture) mustGet(path string) string {
	f.t.Helper()
	code, body := f.get(path)
	if code != http.StatusOK {
		f.t.Fatalf("GET %s: %d\n%s", path, code, body)
	}
	return body
}

// post sends a form; it returns the status, the Location and the body.
func (f *fixture) post(path string, form url.Values, header ...string) (int, string, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// token reads the CSRF token of the forms of a page.
func (f *fixture) token() string {
	f.t.Helper()
	m := csrfRE.FindStringSubmatch(f.mustGet("outbox?i=main&o=orders"))
	if m == nil {
		f.t.Fatal("no CSRF token on the outbox page")
	}
	return m[1]
}

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// act posts an action to the confirmation page, checks that the page says want, then
// confirms it as the page's form does, and returns where the browser is sent.
func (f *fixture) act(form url.Values, want ...string) string {
	f.t.Helper()
	form.Set("csrf", f.token())
	code, _, body := f.post("confirm", form)
	if code != http.StatusOK {
		f.t.Fatalf("confirm %v: %d\n%s", form, code, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			f.t.Fatalf("the confirmation of %v does not say %q:\n%s", form, w, body)
		}
	}
	i := strings.Index(body, `action="do"`)
	if i < 0 {
		f.t.Fatalf("the confirmation of %v has no form to confirm:\n%s", form, body)
	}
	confirmed := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(body[i:], -1) {
		confirmed.Add(m[1], unescape(m[2]))
	}
	code, loc, body := f.post("do", confirmed)
	if code != http.StatusSeeOther {
		f.t.Fatalf("do %v: %d\n%s", confirmed, code, body)
	}
	return loc
}

func unescape(s string) string {
	r := strings.NewReplacer("&#34;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">", "&amp;", "&", "&#43;", "+")
	return r.Replace(s)
}

func ids(v ...int64) []string {
	out := make([]string, len(v))
	for i, id := range v {
		out[i] = fmt.Sprint(id)
	}
	return out
}
