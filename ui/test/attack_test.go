package uitest

// Attacks on the dashboard's promises: hostile data, CSRF and read-only,
// filters and cursors, bulk actions racing the relay, mounting. Each test is a proof
// kept: it failed before the fix it names, or it pins a refusal the dashboard makes.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
	outboxerui "github.com/outboxer-go/outboxer/ui"
)

// publishTo publishes messages to outbox (any name) of the fixture's table with an
// instance of its own, and returns their IDs.
func (f *fixture) publishTo(outbox string, ms []msg, opts ...[]core.PublishOption) []int64 {
	f.t.Helper()
	ctx := context.Background()
	ob, err := core.New(core.Config{DB: f.db.DB, Dialect: f.db.Dialect, Table: table, PublishOnly: true, Codec: rawCodec, MaxPayloadBytes: 16 << 20,
		Outboxes: map[string]core.OutboxConfig{outbox: {}}})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []int64
	for i, m := range ms {
		m.box = outbox
		var o []core.PublishOption
		if i < len(opts) {
			o = opts[i]
		}
		env, err := ob.Publish(ctx, f.db.DB, m, o...)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, env.ID)
	}
	return out
}

// confirmation posts an action to the confirmation page and returns its body and the
// fields its form would send to do.
func (f *fixture) confirmation(form url.Values) (string, url.Values) {
	f.t.Helper()
	form.Set("csrf", f.token())
	code, _, body := f.post("confirm", form)
	if code != http.StatusOK {
		f.t.Fatalf("confirm %v: %d\n%s", form, code, body)
	}
	confirmed := url.Values{}
	if i := strings.Index(body, `action="do"`); i >= 0 {
		for _, m := range hiddenRE.FindAllStringSubmatch(body[i:], -1) {
			confirmed.Add(m[1], unescape(m[2]))
		}
	}
	return body, confirmed
}

// done posts a confirmed action and returns how many messages its report says changed.
func (f *fixture) done(confirmed url.Values) int64 {
	f.t.Helper()
	code, loc, body := f.post("do", confirmed)
	if code != http.StatusSeeOther {
		f.t.Fatalf("do %v: %d\n%s", confirmed, code, body)
	}
	u, err := url.Parse(loc)
	if err != nil {
		f.t.Fatal(err)
	}
	n, _ := strconv.ParseInt(u.Query().Get("n"), 10, 64)
	return n
}

// TestAttackHostileNamesAreText: an outbox name, a type, a group key and headers made to
// break out of text, attributes and URLs show as text on every page, and no link of a
// page is a javascript: URL.
func TestAttackHostileNamesAreText(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		const (
			box   = `</title><script>alert(6)</script>`
			typ   = `"><svg onload=alert(7)>`
			group = `javascript:alert(8)`
			css   = `</style><style>body{background:url(//evil.example/x)}</style>`
		)
		deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000) // deeper than encoding/json goes
		ids := f.publishTo(box, []msg{
			{typ: typ, body: []byte(`{"html":"</script><script>alert(9)</script>"}`)},
			{typ: typ, body: []byte("nul\x00 and invalid \xff\xfe utf-8 </pre><script>alert(10)</script>")},
			{typ: typ, body: []byte(deep)},
			{typ: typ, body: []byte(`{"a":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5001))},
		}, []core.PublishOption{core.WithGroupKey(group), core.WithHeaders(map[string]string{
			"link": "javascript:alert(11)", css: css, `"quoted" key`: `' onmouseover=alert(12) '`})})
		pages := []string{"", "outbox?i=main&o=" + url.QueryEscape(box), "messages?i=main&o=" + url.QueryEscape(box)}
		for _, id := range ids {
			pages = append(pages, "message?i=main&o="+url.QueryEscape(box)+"&id="+strconv.FormatInt(id, 10))
		}
		for _, p := range pages {
			body := f.mustGet(p)
			mustNotContain(t, p, body, "<script>alert", "<svg", "<style>body", `href="javascript:`, "href='javascript:",
				`' onmouseover`, "\x00")
			if p != "" && !strings.Contains(body, "&lt;/title&gt;&lt;script&gt;alert(6)&lt;/script&gt;") {
				t.Errorf("%s does not show the outbox name as text:\n%s", p, body)
			}
		}
		body := f.mustGet(pages[3])
		mustContain(t, "the message with hostile headers", body, "javascript:alert(11)", "&lt;/style&gt;&lt;style&gt;", "&#39; onmouseover=alert(12) &#39;",
			"&lt;/script&gt;&lt;script&gt;alert(9)&lt;/script&gt;")
		body = f.mustGet(pages[4])
		mustContain(t, "a payload with NUL and invalid UTF-8", body, "binary (hex)", "6e 75 6c 00")
		// Deeper than encoding/json parses: text; 5000 objects deep: indented JSON.
		mustContain(t, "a too deeply nested payload", f.mustGet(pages[5]), "text, 39.1 KiB", strings.Repeat("[", 100))
		mustContain(t, "a deeply nested payload", f.mustGet(pages[6]), "JSON, ", "&#34;a&#34;: {\n")
		// The confirmation of an action on that outbox names it as text too.
		body, _ = f.confirmation(url.Values{"i": {"main"}, "o": {box}, "op": {"discard"}, "scope": {"ids"}, "id": ids2s(ids[:1])})
		mustContain(t, "the confirmation", body, "&lt;/title&gt;&lt;script&gt;alert(6)")
		mustNotContain(t, "the confirmation", body, "<script>alert")
	})
}

func ids2s(v []int64) []string { return ids(v...) }

// TestAttackHostileInstanceName: an instance name is shown as text, in ids and links too.
func TestAttackHostileInstanceName(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		name := `"><script>alert(13)</script>`
		h, err := outboxerui.New(outboxerui.Config{Instances: []outboxerui.Instance{{Name: name, DB: db.DB, Dialect: db.Dialect, Table: table}}})
		if err != nil {
			t.Fatal(err)
		}
		f.srv.Config.Handler = h
		f.base = f.srv.URL + "/"
		for _, p := range []string{"", "outbox?o=orders&i=" + url.QueryEscape(name), "messages?o=mail&state=dead&i=" + url.QueryEscape(name),
			"message?o=mail&id=" + strconv.FormatInt(f.dead[0], 10) + "&i=" + url.QueryEscape(name)} {
			body := f.mustGet(p)
			mustNotContain(t, p, body, "<script>alert(13)", `"><script>`)
		}
		mustContain(t, "the overview", f.mustGet(""), `href="outbox?i=%22%3E%3Cscript%3Ealert%2813%29%3C%2Fscript%3E&amp;o=orders"`)
	})
}

// TestAttackSecurityHeadersOnEveryResponse: errors, refusals, redirects and static files
// carry the Content-Security-Policy too.
func TestAttackSecurityHeadersOnEveryResponse(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		check := func(what string, resp *http.Response, wantCode int) {
			t.Helper()
			resp.Body.Close()
			if resp.StatusCode != wantCode {
				t.Errorf("%s: %d, want %d", what, resp.StatusCode, wantCode)
			}
			csp := resp.Header.Get("Content-Security-Policy")
			if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") {
				t.Errorf("%s: Content-Security-Policy %q", what, csp)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s: no X-Content-Type-Options: nosniff", what)
			}
		}
		do := func(method, path string, body string, header ...string) *http.Response {
			req, _ := http.NewRequest(method, f.base+path, strings.NewReader(body))
			if body != "" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		tok := "csrf=" + f.token()
		check("an unknown page", do("GET", "nope", ""), http.StatusNotFound)
		check("an unknown outbox", do("GET", "outbox?i=main&o=nope", ""), http.StatusNotFound)
		check("a bad filter", do("GET", "messages?i=main&o=orders&state=lost", ""), http.StatusBadRequest)
		check("a missing message", do("GET", "message?i=main&o=orders&id=999999", ""), http.StatusNotFound)
		check("the stylesheet", do("GET", "static/app.css", ""), http.StatusOK)
		check("a missing static file", do("GET", "static/nope.js", ""), http.StatusNotFound)
		check("GET of an action", do("GET", "do?op=discard", ""), http.StatusMethodNotAllowed)
		check("PUT of an action", do("PUT", "do", tok), http.StatusMethodNotAllowed)
		check("a POST without token", do("POST", "do", "op=discard"), http.StatusForbidden)
		check("a cross-site POST", do("POST", "do", tok, "Sec-Fetch-Site", "cross-site"), http.StatusForbidden)
		check("a bad action", do("POST", "confirm", tok+"&op=explode"), http.StatusBadRequest)
		check("an action's redirect", do("POST", "do", tok+"&i=main&o=orders&op=pause"), http.StatusSeeOther)
		rec := httptest.NewRecorder()
		http.StripPrefix("/admin/outbox", f.handler).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/outbox", nil))
		check("the mount point's redirect", rec.Result(), http.StatusMovedPermanently)
	})
}

// TestAttackRetryAllLeavesScheduledMessages: "Retry all matching" on the pending list
// retries the failed messages; a message scheduled for later (WithDelay) that never
// failed is not "waiting for a retry" and must keep its time. It was made due at once.
func TestAttackRetryAllLeavesScheduledMessages(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		body, confirmed := f.confirmation(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"retry"}, "scope": {"filter"}, "state": {"pending"}})
		mustContain(t, "the confirmation", body, "Retry 1 message of outbox")
		if n := f.done(confirmed); n != 1 {
			t.Fatalf("retried %d, want 1 (the failed one)", n)
		}
		if got := listed(f.mustGet("messages?i=main&o=orders&state=scheduled")); !slices.Equal(got, []int64{f.scheduled}) {
			t.Fatalf("after retrying the pending list, the scheduled list is %v, want [%d]: a scheduled message was made due", got, f.scheduled)
		}
		// Selected by ID: the same.
		body, confirmed = f.confirmation(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"retry"}, "scope": {"ids"}, "id": ids(f.scheduled)})
		mustNotContain(t, "the confirmation of a scheduled message", body, "due now")
		if len(confirmed) > 0 {
			f.done(confirmed)
		}
		if got := listed(f.mustGet("messages?i=main&o=orders&state=scheduled")); !slices.Equal(got, []int64{f.scheduled}) {
			t.Fatalf("after retrying it by ID, the scheduled list is %v, want [%d]", got, f.scheduled)
		}
	})
}

// TestAttackBulkChangesWhatWasCounted: between the confirmation and the click, an older
// message (a lower ID than the newest counted) dies. The discard must change the
// messages counted, not one more.
func TestAttackBulkChangesWhatWasCounted(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		// p waits for its time; q dies now: q is the newest dead message.
		p, err := f.ob.Publish(ctx, db.DB, msg{"mail", "mail.send", []byte("dies after the confirmation")}, core.WithDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		q, err := f.ob.Publish(ctx, db.DB, msg{"mail", "mail.send", []byte("dead before it")})
		if err != nil {
			t.Fatal(err)
		}
		f.relay.fail(q.ID, errorString("dead"))
		f.relay.fail(p.ID, errorString("dead too"))
		f.drain("mail")
		body, confirmed := f.confirmation(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}})
		mustContain(t, "the confirmation", body, "Delete 4 messages")
		// p's hour passes (its row is due now), and it dies.
		quote := func(s string) string {
			if db.Dialect == core.MySQL {
				return "`" + s + "`"
			}
			return `"` + s + `"`
		}
		if _, err := db.ExecContext(ctx, `UPDATE `+quote(table)+` SET available_at = created_at WHERE id = `+strconv.FormatInt(p.ID, 10)); err != nil {
			t.Fatal(err)
		}
		f.drain("mail")
		if c := f.counts("mail"); c.Dead != 5 {
			t.Fatalf("dead before the click: %d, want 5", c.Dead)
		}
		if n := f.done(confirmed); n != 4 {
			t.Errorf("the click discarded %d messages; the confirmation counted 4", n)
		}
		if got := listed(f.mustGet("messages?i=main&o=mail&state=dead")); !slices.Equal(got, []int64{p.ID}) {
			t.Errorf("dead after the discard: %v, want [%d], the one that died after the confirmation", got, p.ID)
		}
	})
}

// TestAttackFiltersAreParameters: SQL in every filter and cursor is a value: it selects
// nothing (or is refused), and the table is intact after.
func TestAttackFiltersAreParameters(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		inject := []string{`' OR '1'='1`, `x'); DROP TABLE "Order"; --`, "x`; DROP TABLE `Order`; --", `\' OR 1=1 -- `, `%' OR '%'='`, "' UNION SELECT 1,2,3 --"}
		for _, name := range []string{"type", "group", "hk", "hv", "err"} {
			for _, v := range inject {
				q := "messages?i=main&o=orders&" + name + "=" + url.QueryEscape(v)
				if name == "hv" {
					q += "&hk=tenant"
				}
				if got := listed(f.mustGet(q)); len(got) != 0 {
					t.Errorf("%s lists %v, want nothing", q, got)
				}
			}
		}
		for _, name := range []string{"min", "max", "age", "state", "o", "i"} {
			for _, v := range inject {
				q := url.Values{"i": {"main"}, "o": {"orders"}}
				q.Set(name, v)
				code, _ := f.get("messages?" + q.Encode())
				if code != http.StatusBadRequest && code != http.StatusNotFound {
					t.Errorf("messages?%s=%q: %d, want 400 or 404", name, v, code)
				}
			}
		}
		// Cursors that are not IDs show the first page; the page after the last ID, none.
		all := []int64{f.stuck, f.held1, f.held2, f.scheduled}
		for _, c := range []string{"-1", "abc", "1e3", "0x10", "99999999999999999999", "1;DROP", " 1", "%00"} {
			for _, k := range []string{"after", "before"} {
				if got := listed(f.mustGet("messages?i=main&o=orders&" + k + "=" + url.QueryEscape(c))); !slices.Equal(got, all) {
					t.Errorf("%s=%q lists %v, want the first page %v", k, c, got, all)
				}
			}
		}
		if got := listed(f.mustGet("messages?i=main&o=orders&after=9223372036854775807")); len(got) != 0 {
			t.Errorf("after the largest ID: %v", got)
		}
		if got := listed(f.mustGet("messages?i=main&o=orders&before=9223372036854775807")); !slices.Equal(got, all) {
			t.Errorf("before the largest ID: %v, want %v", got, all)
		}
		// Actions carry filters too: the confirmation of a bulk action with them counts
		// nothing and the table is whole.
		for _, v := range inject {
			body, _ := f.confirmation(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}, "type": {v}})
			mustContain(t, "a confirmation with SQL as type", body, "Nothing to change.")
		}
		for _, bad := range []url.Values{{"id": {"1 OR 1=1"}}, {"id": {"-1"}}, {"id": {"0"}}, {"upto": {"-5"}, "scope": {"filter"}}, {"id": {"1,x"}}} {
			form := url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"ids"}, "csrf": {f.token()}}
			for k, v := range bad {
				form[k] = v
			}
			if code, _, _ := f.post("do", form); code != http.StatusBadRequest {
				t.Errorf("do with %v: %d, want 400", bad, code)
			}
		}
		if c := f.counts("mail"); c.Dead != 3 {
			t.Fatalf("mail has %d dead after the attempts, want 3", c.Dead)
		}
		if c := f.counts("orders"); c.Pending != 4 {
			t.Fatalf("orders has %d pending after the attempts, want 4", c.Pending)
		}
	})
}

// TestAttackFiltersMatchExactly: LIKE wildcards and quotes in header filters are
// characters; header names and values, group keys and types compare exactly, case and
// trailing spaces included (MariaDB's default collations ignore both).
func TestAttackFiltersMatchExactly(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		h := func(k, v string) []core.PublishOption {
			return []core.PublishOption{core.WithHeaders(map[string]string{k: v})}
		}
		g := func(k string) []core.PublishOption { return []core.PublishOption{core.WithGroupKey(k)} }
		m := func(typ string) msg { return msg{typ: typ, body: []byte("x")} }
		id := f.publishTo("exact", []msg{m("t"), m("t"), m("t"), m("t"), m("t"), m("t"), m("t"), m("t"), m("t"), m("t"), m("T"), m("t "), m("t")},
			h("tenant", "acme"), h("Tenant", "ACME"), h("tenant", "a%e"), h("tenant", "a_me"), h("ten_nt", "x"), h(`te"n`, `a"b`), h("t", `x\`),
			g("g"), g("G"), g("g "), nil, nil, g(" g"))
		for _, c := range []struct {
			query string
			want  []int64
		}{
			{"hk=tenant&hv=acme", id[0:1]},
			{"hk=Tenant&hv=ACME", id[1:2]},
			{"hk=tenant&hv=a%25e", id[2:3]},
			{"hk=tenant&hv=a_me", id[3:4]},
			{"hk=tenant&hv=a", nil},
			{"hk=ten_nt", id[4:5]},
			{"hk=tenant", []int64{id[0], id[2], id[3]}},
			{"hk=" + url.QueryEscape(`te"n`) + "&hv=" + url.QueryEscape(`a"b`), id[5:6]},
			{"hk=t&hv=" + url.QueryEscape(`x\`), id[6:7]},
			{"group=g", id[7:8]},
			{"group=G", id[8:9]},
			{"group=g+", id[9:10]},
			{"group=+g", id[12:13]},
			{"type=T", id[10:11]},
			{"type=t+", id[11:12]},
		} {
			if got := listed(f.mustGet("messages?i=main&o=exact&" + c.query)); !slices.Equal(got, c.want) {
				t.Errorf("messages?%s lists %v, want %v", c.query, got, c.want)
			}
		}
		// Error text: as written, on every database.
		if got := listed(f.mustGet("messages?i=main&o=orders&err=BROKER+SAID")); len(got) != 0 {
			t.Errorf("an error filter in capitals lists %v, want nothing (the error is in lower case)", got)
		}
		// A bulk discard over a group discards that group only.
		body, confirmed := f.confirmation(url.Values{"i": {"main"}, "o": {"exact"}, "op": {"discard"}, "scope": {"filter"}, "state": {"pending"}, "group": {"g"}})
		mustContain(t, "the confirmation", body, "Delete 1 message ")
		if n := f.done(confirmed); n != 1 {
			t.Fatalf("discarded %d of group g, want 1", n)
		}
	})
}

// noJar is a client without cookies of its own (only those a request carries), that
// does not follow redirects.
var noJar = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestAttackCSRF: a token is bound to its cookie and to the handler's key; a token from
// another dashboard, in the URL, or with a cookie of another length is refused; no
// method or override header gets around the POST and its token.
func TestAttackCSRF(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		discard := url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"ids"}, "id": ids(f.dead...)}
		// Another dashboard over the same table, with its own key: its token, sent with
		// its cookie, is refused here.
		other, err := outboxerui.New(outboxerui.Config{Instances: []outboxerui.Instance{{Name: "main", DB: db.DB, Dialect: db.Dialect, Table: table}}})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		other.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/outbox?i=main&o=orders", nil))
		m := csrfRE.FindStringSubmatch(rec.Body.String())
		cookie := rec.Result().Cookies()
		if m == nil || len(cookie) != 1 {
			t.Fatalf("the other dashboard gave no token or cookie")
		}
		raw := func(method, path, body string, header ...string) int {
			req, _ := http.NewRequest(method, f.base+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := noJar.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		form := func(tok string) string {
			v := url.Values{}
			for k, x := range discard {
				v[k] = x
			}
			v.Set("csrf", tok)
			return v.Encode()
		}
		if code := raw("POST", "do", form(m[1]), "Cookie", cookie[0].Name+"="+cookie[0].Value); code != http.StatusForbidden {
			t.Errorf("another dashboard's token with its cookie: %d, want 403", code)
		}
		token := f.token()
		u, _ := url.Parse(f.base)
		ours := f.client.Jar.Cookies(u)
		if len(ours) != 1 {
			t.Fatalf("cookies of the dashboard: %v", ours)
		}
		for _, c := range []struct {
			name, method, path, body string
			header                   []string
		}{
			{"the token in the URL", "POST", "do?csrf=" + token, form(""), []string{"Cookie", ours[0].Name + "=" + ours[0].Value}},
			{"an empty cookie and an empty token", "POST", "do", form(""), []string{"Cookie", ours[0].Name + "="}},
			{"a short cookie", "POST", "do", form(token), []string{"Cookie", ours[0].Name + "=" + ours[0].Value[:63]}},
			{"two tokens, the first wrong", "POST", "do", "csrf=x&" + form(token), []string{"Cookie", ours[0].Name + "=" + ours[0].Value}},
			{"a null origin", "POST", "do", form(token), []string{"Cookie", ours[0].Name + "=" + ours[0].Value, "Origin", "null"}},
			{"a same-site sibling", "POST", "do", form(token), []string{"Cookie", ours[0].Name + "=" + ours[0].Value, "Sec-Fetch-Site", "same-site"}},
		} {
			if code := raw(c.method, c.path, c.body, c.header...); code != http.StatusForbidden {
				t.Errorf("%s: %d, want 403", c.name, code)
			}
		}
		for _, c := range []struct {
			method, path string
			header       []string
		}{
			{"GET", "do?" + form(token), nil},
			{"GET", "confirm?" + form(token), nil},
			{"HEAD", "do?" + form(token), nil},
			{"PUT", "do", nil},
			{"DELETE", "do?" + form(token), nil},
			{"PATCH", "do", nil},
			{"GET", "do?" + form(token), []string{"X-HTTP-Method-Override", "POST"}},
			{"GET", "do?_method=POST&" + form(token), nil},
			{"post", "do", nil},
		} {
			code := raw(c.method, c.path, form(token), append([]string{"Cookie", ours[0].Name + "=" + ours[0].Value}, c.header...)...)
			if code != http.StatusMethodNotAllowed && code != http.StatusBadRequest && code != http.StatusNotFound {
				t.Errorf("%s %s: %d, want a refusal", c.method, c.path, code)
			}
		}
		if c := f.counts("mail"); c.Dead != 3 {
			t.Fatalf("a refused request discarded: %d dead, want 3", c.Dead)
		}
		// The same token, with its cookie, works more than once: it is not one-time, but
		// the action it carries is idempotent (see TestAttackDoubleSubmit).
		if code := raw("POST", "do", form(token), "Cookie", ours[0].Name+"="+ours[0].Value); code != http.StatusSeeOther {
			t.Fatalf("the right token and cookie: %d, want 303", code)
		}
		if c := f.counts("mail"); c.Dead != 0 {
			t.Fatalf("the discard left %d dead", c.Dead)
		}
	})
}

// TestAttackReadOnlyRefusesEverything: a read-only dashboard refuses every action, with a
// valid token and cookie (made by a writable dashboard sharing its CSRF key), every op and
// scope, and every method.
func TestAttackReadOnlyRefusesEverything(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		key := []byte(strings.Repeat("k", 32))
		f := newFixture(t, db, func(c *outboxerui.Config) { c.CSRFKey = key })
		token := f.token() // from the writable dashboard, in the client's jar
		ro, err := outboxerui.New(outboxerui.Config{ReadOnly: true, CSRFKey: key,
			Instances: []outboxerui.Instance{{Name: "main", DB: db.DB, Dialect: db.Dialect, Table: table}}})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", ro))
		f.srv.Config.Handler = mux
		for _, op := range []string{"retry", "discard", "pause", "resume"} {
			for _, scope := range []string{"ids", "filter", ""} {
				form := url.Values{"i": {"main"}, "o": {"mail"}, "op": {op}, "scope": {scope}, "state": {"dead"}, "id": ids(f.dead...),
					"upto": {"1000000"}, "csrf": {token}}
				for _, path := range []string{"confirm", "do", "confirm?read_only=0", "do/"} {
					if code, _, _ := f.post(path, form); code != http.StatusForbidden {
						t.Errorf("read-only: %s %s to %s: %d, want 403", op, scope, path, code)
					}
				}
			}
		}
		for _, method := range []string{"PUT", "DELETE", "PATCH"} {
			req, _ := http.NewRequest(method, f.base+"do", strings.NewReader(url.Values{"op": {"discard"}, "csrf": {token}}.Encode()))
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode < 400 {
				t.Errorf("read-only: %s do: %d", method, resp.StatusCode)
			}
		}
		for _, p := range []string{"messages?i=main&o=orders&state=pending", "outbox?i=main&o=mail"} {
			mustNotContain(t, "read-only "+p, f.mustGet(p), `name="csrf"`, `action="confirm"`, `action="do"`)
		}
		if c := f.counts("mail"); c.Dead != 3 {
			t.Fatalf("a read-only dashboard changed mail: %+v", c)
		}
		h, err := f.ob.Health(context.Background(), "orders")
		if err != nil || h.Outboxes[0].Paused {
			t.Fatalf("a read-only dashboard paused orders (err %v)", err)
		}
	})
}

// TestAttackDoubleSubmit: the same confirmation sent twice changes things once; an action
// on a message that changed state since its confirmation leaves it alone.
func TestAttackDoubleSubmit(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		for _, form := range []url.Values{
			{"i": {"main"}, "o": {"mail"}, "op": {"retry"}, "scope": {"ids"}, "id": ids(f.dead[0])},
			{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"ids"}, "id": ids(f.dead[1])},
			{"i": {"main"}, "o": {"mail"}, "op": {"retry"}, "scope": {"filter"}, "state": {"dead"}},
		} {
			_, confirmed := f.confirmation(form)
			if n := f.done(confirmed); n != 1 {
				t.Fatalf("%v: changed %d, want 1", form, n)
			}
			if n := f.done(confirmed); n != 0 {
				t.Fatalf("%v sent again: changed %d, want 0", form, n)
			}
		}
		if c := f.counts("mail"); c.Pending != 2 || c.Dead != 0 {
			t.Fatalf("mail after the double submits: %+v, want 2 pending", c)
		}
		// Retry of a message no longer dead: it was retried (and is pending again) between
		// the confirmation and the click: the click leaves it as it is.
		_, confirmed := f.confirmation(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"retry"}, "scope": {"ids"}, "id": ids(f.stuck)})
		f.relay.heal()
		f.drain("mail") // delivers the two retried: gone
		if n := f.done(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"retry"}, "scope": {"ids"}, "id": ids(f.dead...), "csrf": {f.token()}}); n != 0 {
			t.Fatalf("a retry of messages delivered since: %d changed, want 0", n)
		}
		if n := f.done(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"ids"}, "id": ids(f.dead...), "csrf": {f.token()}}); n != 0 {
			t.Fatalf("a discard of messages delivered since: %d changed, want 0", n)
		}
		if n := f.done(confirmed); n != 1 {
			t.Fatalf("the confirmed retry of the waiting message: %d, want 1", n)
		}
		// Sent again, the message is still waiting (due now, until a relay takes it): the
		// click makes it due now again, which changes nothing that matters.
		f.done(confirmed)
		if res := f.drain("orders"); res.Delivered != 3 {
			t.Fatalf("after the retry sent twice, a drain delivered %d, want the 3 of g1", res.Delivered)
		}
	})
}

// TestAttackPauseUnknownOutbox: pausing or resuming an outbox the table does not have is
// a 404 and creates nothing; pausing twice is one pause.
func TestAttackPauseUnknownOutbox(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		for _, op := range []string{"pause", "resume"} {
			for _, path := range []string{"confirm", "do"} {
				for _, o := range []string{"nope", "Orders", "orders ", ""} {
					form := url.Values{"i": {"main"}, "o": {o}, "op": {op}, "csrf": {f.token()}}
					if code, _, _ := f.post(path, form); code != http.StatusNotFound {
						t.Errorf("%s of outbox %q to %s: %d, want 404", op, o, path, code)
					}
				}
				form := url.Values{"i": {"nope"}, "o": {"orders"}, "op": {op}, "csrf": {f.token()}}
				if code, _, _ := f.post(path, form); code != http.StatusNotFound {
					t.Errorf("%s in an unknown instance to %s: %d, want 404", op, path, code)
				}
			}
		}
		body := f.mustGet("")
		mustNotContain(t, "the overview", body, `o=nope"`, `o=Orders"`)
		for range 2 {
			f.done(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"pause"}, "csrf": {f.token()}})
		}
		f.done(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"resume"}, "csrf": {f.token()}})
		h, err := f.ob.Health(context.Background(), "orders")
		if err != nil || h.Outboxes[0].Paused {
			t.Fatalf("paused twice, resumed once: paused=%v (err %v), want running", h.Outboxes[0].Paused, err)
		}
	})
}

// TestAttackDiscardInFlight: a message discarded while the relay has it in hand stays
// gone (the relay's failure finds no row), and its group's next message moves on.
func TestAttackDiscardInFlight(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		// g1's blocking message is due now; the relay holds it until the discard is done.
		f.done(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"retry"}, "scope": {"ids"}, "id": ids(f.stuck), "csrf": {f.token()}})
		entered, release := make(chan struct{}), make(chan struct{})
		f.relay.mu.Lock()
		f.relay.failing[f.stuck] = errorString("failed after the discard")
		f.relay.mu.Unlock()
		blocking := &gate{relay: f.relay, id: f.stuck, entered: entered, release: release}
		ob, err := core.New(core.Config{DB: db.DB, Dialect: db.Dialect, Table: table, Manual: true, Codec: rawCodec,
			Outboxes: map[string]core.OutboxConfig{"orders": {Relay: blocking, Ordering: core.OrderGroup, Partitions: 2, Backoff: core.Backoff{Min: time.Hour, Max: time.Hour}}}})
		if err != nil {
			t.Fatal(err)
		}
		drained := make(chan error, 1)
		go func() { _, err := ob.Drain(ctx, "orders"); drained <- err }()
		<-entered
		if n := f.done(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"discard"}, "scope": {"ids"}, "id": ids(f.stuck), "csrf": {f.token()}}); n != 1 {
			t.Fatalf("discard in flight: %d, want 1", n)
		}
		close(release)
		if err := <-drained; err != nil {
			t.Fatalf("the drain with a discarded message in flight: %v", err)
		}
		if code, _ := f.get("message?i=main&o=orders&id=" + strconv.FormatInt(f.stuck, 10)); code != http.StatusNotFound {
			t.Fatalf("the discarded message came back: %d", code)
		}
		f.relay.heal()
		f.drain("orders")
		if got := listed(f.mustGet("messages?i=main&o=orders&group=g1")); len(got) != 0 {
			t.Fatalf("g1 after the discard and a drain: %v left, want none", got)
		}
	})
}

// gate is a relay that stops in Deliver at the batch holding id until released.
type gate struct {
	*relay
	id               int64
	entered, release chan struct{}
}

func (g *gate) Deliver(ctx context.Context, batch []core.Envelope) error {
	for _, e := range batch {
		if e.ID == g.id {
			close(g.entered)
			<-g.release
		}
	}
	return g.relay.Deliver(ctx, batch)
}

// TestAttackPaginationUnderChurn: rows inserted and deleted between pages: walking
// forward lists each row that lived through the walk exactly once, in order, and never a
// row twice.
func TestAttackPaginationUnderChurn(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, pageSize(3))
		ctx := context.Background()
		publish := func(n int) []int64 {
			var out []int64
			for i := range n {
				env, err := f.ob.Publish(ctx, db.DB, msg{"mail", "churn", []byte(strconv.Itoa(i))})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, env.ID)
			}
			return out
		}
		rows := publish(12)
		deleted := map[int64]bool{}
		discard := func(id int64) {
			if _, err := f.ob.Discard(ctx, "mail", id); err != nil {
				t.Fatal(err)
			}
			deleted[id] = true
		}
		var seen []int64
		path := "messages?i=main&o=mail&type=churn"
		for page := 0; path != ""; page++ {
			body := f.mustGet(path)
			got := listed(body)
			seen = append(seen, got...)
			m := regexp.MustCompile(`href="(messages\?[^"]*)" id="next"`).FindStringSubmatch(body)
			path = ""
			if m != nil {
				path = unescape(m[1])
			}
			if page > 10 {
				t.Fatal("more than 10 pages")
			}
			// Between pages: the last row shown and the next one not shown yet go; new
			// rows come.
			if len(got) > 0 {
				discard(got[len(got)-1])
				for _, id := range rows {
					if id > got[len(got)-1] && !deleted[id] {
						discard(id)
						break
					}
				}
			}
			if path != "" {
				rows = append(rows, publish(1)...)
			}
		}
		if !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
			t.Fatalf("the walk listed %v: out of order or twice", seen)
		}
		for _, id := range rows {
			if !deleted[id] && !slices.Contains(seen, id) {
				t.Errorf("row %d lived through the walk and was not listed (listed %v)", id, seen)
			}
		}
	})
}

// TestAttackPreviewsOfUnicodeText: a payload of multi-byte text is previewed as text in
// the list, whatever byte its preview is cut at, and a text payload over the 1 MiB shown
// is shown as text, not hex, whatever byte the cut falls on.
func TestAttackPreviewsOfUnicodeText(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		text := "a" + strings.Repeat("é", 60)      // the 80-byte preview ends inside an é
		big := "a" + strings.Repeat("€", 10<<20/3) // 10 MiB; the 1 MiB cut ends inside a €
		id := f.publishTo("unicode", []msg{{typ: "t", body: []byte(text)}, {typ: "t", body: []byte(big)}})
		body := f.mustGet("messages?i=main&o=unicode")
		mustContain(t, "the list", body, `<td class="payload">a`+strings.Repeat("é", 20))
		if !utf8.ValidString(body) {
			t.Errorf("the list is not valid UTF-8")
		}
		body = f.mustGet("message?i=main&o=unicode&id=" + strconv.FormatInt(id[1], 10))
		mustContain(t, "the 10 MiB message", body, "text, 10.0 MiB, the first 1 MiB shown", "a€€€€")
		if !utf8.ValidString(body) {
			t.Errorf("the page of the 10 MiB message is not valid UTF-8")
		}
	})
}

// TestAttackMounting: under a prefix, dot segments and encoded slashes reach no file but
// the dashboard's own, and the mount point's redirect stays on this site, whatever the
// request's target says.
func TestAttackMounting(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		for _, p := range []string{"static/../../go.mod", "static/..%2f..%2fgo.mod", "static%2fapp.css", "static/%2e%2e/templates/layout.html",
			"static/..%5c..%5cgo.mod", "templates/layout.html", "static/../templates/layout.html", "%2e%2e/%2e%2e/etc/passwd", "static//app.js/.."} {
			resp, err := noJar.Get(f.base + p)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4096)
			n, _ := resp.Body.Read(b)
			resp.Body.Close()
			body := string(b[:n])
			if strings.Contains(body, "module ") || strings.Contains(body, "{{") || strings.Contains(body, "root:") {
				t.Errorf("GET %s: %d served a file that is not the dashboard's:\n%s", p, resp.StatusCode, body)
			}
			if resp.StatusCode == http.StatusOK && !strings.HasPrefix(p, "static") {
				t.Errorf("GET %s: 200", p)
			}
		}
		// The dashboard as the server's root handler (as outboxer ui serves it): a request
		// whose target has no path is sent to a relative location, never to another site.
		srv := httptest.NewServer(f.handler)
		defer srv.Close()
		for _, target := range []string{"https:evil.example", "http:evil.example", "https:%2f%2fevil.example", "javascript:alert(1)"} {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: dashboard.example\r\nConnection: close\r\n\r\n", target)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			conn.Close()
			loc := resp.Header.Get("Location")
			if loc == "" {
				continue
			}
			if u, err := url.Parse(loc); err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(loc, "/") {
				t.Errorf("GET %s: %d to %q: not a relative location on this site", target, resp.StatusCode, loc)
			}
		}
	})
}

// TestAttackInstancesNeedingQuoting: one dashboard over tables named by reserved words
// in mixed case and, on PostgreSQL, a schema in mixed case: each page and action stays
// in the instance it names.
func TestAttackInstancesNeedingQuoting(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		type inst struct{ name, table, schema string }
		insts := []inst{{"select", "Select", ""}, {"user", "user", ""}}
		if db.Dialect == core.Postgres {
			schema := "Attack_" + strconv.FormatInt(time.Now().UnixNano(), 36)
			t.Cleanup(func() { db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`) })
			insts = append(insts, inst{"schema", "Group", schema})
		}
		cfg := outboxerui.Config{Instances: []outboxerui.Instance{{Name: "main", DB: db.DB, Dialect: db.Dialect, Table: table}}}
		dead := map[string]int64{}
		obs := map[string]*core.Outboxer{}
		for _, in := range insts {
			ob, err := core.New(core.Config{DB: db.DB, Dialect: db.Dialect, Table: in.table, Schema: in.schema, Manual: true, Codec: rawCodec,
				Outboxes: map[string]core.OutboxConfig{"orders": {Relay: f.relay, MaxAttempts: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := ob.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			env, err := ob.Publish(ctx, db.DB, msg{"orders", "in." + in.name, []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			f.relay.fail(env.ID, errorString("dead in "+in.name))
			if _, err := ob.Drain(ctx, "orders"); err != nil {
				t.Fatal(err)
			}
			dead[in.name], obs[in.name] = env.ID, ob
			cfg.Instances = append(cfg.Instances, outboxerui.Instance{Name: in.name, DB: db.DB, Dialect: db.Dialect, Table: in.table, Schema: in.schema})
		}
		h, err := outboxerui.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		f.srv.Config.Handler = h
		f.base = f.srv.URL + "/"
		body := f.mustGet("")
		for _, in := range insts {
			mustContain(t, "the overview", body, `id="outboxes-`+in.name+`"`, `href="outbox?i=`+in.name+`&amp;o=orders"`)
			if got := listed(f.mustGet("messages?o=orders&state=dead&i=" + in.name)); !slices.Equal(got, []int64{dead[in.name]}) {
				t.Errorf("instance %s lists dead %v, want [%d]", in.name, got, dead[in.name])
			}
			mustContain(t, "the message of "+in.name, f.mustGet("message?o=orders&i="+in.name+"&id="+strconv.FormatInt(dead[in.name], 10)), "in."+in.name, "dead in "+in.name)
			f.mustGet("outbox?o=orders&i=" + in.name)
		}
		// Pause the first, discard the dead of the second by filter: the others keep theirs.
		f.done(url.Values{"i": {insts[0].name}, "o": {"orders"}, "op": {"pause"}, "csrf": {f.token()}})
		_, confirmed := f.confirmation(url.Values{"i": {insts[1].name}, "o": {"orders"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}})
		if n := f.done(confirmed); n != 1 {
			t.Fatalf("discard in %s: %d, want 1", insts[1].name, n)
		}
		for i, in := range insts {
			hl, err := obs[in.name].Health(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			if paused := hl.Outboxes[0].Paused; paused != (i == 0) {
				t.Errorf("instance %s paused=%v", in.name, paused)
			}
			if c, _ := obs[in.name].Counts(ctx, "orders"); c.Dead != map[bool]int64{true: 0, false: 1}[i == 1] {
				t.Errorf("instance %s has %d dead", in.name, c.Dead)
			}
		}
		if h, _ := f.ob.Health(ctx, "orders"); h.Outboxes[0].Paused {
			t.Errorf("the main instance's orders was paused")
		}
		if c := f.counts("mail"); c.Dead != 3 {
			t.Errorf("the main instance's mail has %d dead, want 3", c.Dead)
		}
	})
}

// TestAttackActionsStayInTheirOutbox: IDs of another outbox, sent with this one's name,
// are neither retried nor discarded, and too many IDs are refused.
func TestAttackActionsStayInTheirOutbox(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		for _, op := range []string{"retry", "discard"} {
			body, confirmed := f.confirmation(url.Values{"i": {"main"}, "o": {"orders"}, "op": {op}, "scope": {"ids"}, "id": ids(f.dead...)})
			mustContain(t, "the confirmation of IDs of another outbox", body, "Nothing to change.")
			if len(confirmed) > 0 {
				t.Fatalf("the confirmation offers to %s messages of another outbox", op)
			}
			if n := f.done(url.Values{"i": {"main"}, "o": {"orders"}, "op": {op}, "scope": {"ids"}, "id": ids(f.dead...), "csrf": {f.token()}}); n != 0 {
				t.Fatalf("%s of mail's IDs named as orders': %d changed", op, n)
			}
		}
		if c := f.counts("mail"); c.Dead != 3 {
			t.Fatalf("mail has %d dead, want 3", c.Dead)
		}
		many := make([]string, 10001)
		for i := range many {
			many[i] = strconv.Itoa(i + 1)
		}
		form := url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"ids"}, "id": {strings.Join(many, ",")}, "csrf": {f.token()}}
		if code, _, body := f.post("confirm", form); code != http.StatusBadRequest || !strings.Contains(body, "select at most 10000") {
			t.Fatalf("10001 IDs: %d\n%s", code, body)
		}
	})
}

// TestAttackBulkOverManyMessages: over more messages than a form carries IDs for, a bulk
// action still changes the messages counted, up to the newest of them, and not one
// published after the confirmation.
func TestAttackBulkOverManyMessages(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, batchSize(5000))
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10001 {
			if _, err := f.ob.Publish(ctx, tx, msg{"mail", "many", []byte(strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		body, confirmed := f.confirmation(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"pending"}, "type": {"many"}})
		mustContain(t, "the confirmation", body, "Delete 10001 messages", "Only messages up to ID")
		late, err := f.ob.Publish(ctx, db.DB, msg{"mail", "many", []byte("late")})
		if err != nil {
			t.Fatal(err)
		}
		if n := f.done(confirmed); n != 10001 {
			t.Fatalf("discarded %d, want 10001", n)
		}
		if got := listed(f.mustGet("messages?i=main&o=mail&type=many")); !slices.Equal(got, []int64{late.ID}) {
			t.Fatalf("left %v, want the message published after the confirmation", got)
		}
	})
}

// TestAttackExtremeFilterValues: the largest durations and IDs a filter parses list
// what they select (all, or nothing) and never fail the page.
func TestAttackExtremeFilterValues(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		all := []int64{f.stuck, f.held1, f.held2, f.scheduled}
		for _, c := range []struct {
			query string
			want  []int64
		}{
			{"age=2562047h", nil},
			{"age=1000000h", nil},
			{"age=87600h", nil},
			{"age=1ns", all},
			{"min=9223372036854775807", nil},
			{"max=9223372036854775807", all},
			{"min=1&max=9223372036854775807", all},
		} {
			code, body := f.get("messages?i=main&o=orders&" + c.query)
			if code != http.StatusOK {
				t.Errorf("messages?%s: %d\n%s", c.query, code, body)
				continue
			}
			if got := listed(body); !slices.Equal(got, c.want) {
				t.Errorf("messages?%s lists %v, want %v", c.query, got, c.want)
			}
		}
		body, _ := f.confirmation(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}, "age": {"2562047h"}})
		mustContain(t, "a confirmation older than 292 years", body, "Nothing to change.")
	})
}

// TestAttackHostileErrorText: a relay error with markup, quotes and non-ASCII text is
// shown as text. (An error with a NUL byte or invalid UTF-8, or over 2000 bytes cut inside
// a character, is not recorded at all on PostgreSQL and MariaDB: the core's confirmation
// fails and the message is delivered again forever; reported, not the dashboard's.)
func TestAttackHostileErrorText(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		ctx := context.Background()
		env, err := f.ob.Publish(ctx, db.DB, msg{"mail", "mail.send", []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		f.relay.fail(env.ID, errorString("ünïcödé \"'` </td><script>alert(14)</script>"))
		f.drain("mail")
		for _, p := range []string{"messages?i=main&o=mail&state=dead", "message?i=main&o=mail&id=" + strconv.FormatInt(env.ID, 10)} {
			body := f.mustGet(p)
			mustContain(t, p, body, "&lt;/td&gt;&lt;script&gt;alert(14)&lt;/script&gt;")
			mustNotContain(t, p, body, "<script>alert(14)")
			if !utf8.ValidString(body) {
				t.Errorf("%s is not valid UTF-8", p)
			}
		}
	})
}

// TestAttackPagingBackUnderChurn: walking back from the last page with "previous" while
// rows on both sides of the page go lists each surviving row once, and ends on the first.
func TestAttackPagingBackUnderChurn(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, pageSize(3))
		ctx := context.Background()
		var rows []int64
		for i := range 14 {
			env, err := f.ob.Publish(ctx, db.DB, msg{"mail", "back", []byte(strconv.Itoa(i))})
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, env.ID)
		}
		linkRE := regexp.MustCompile(`href="(messages\?[^"]*)" id="prev"`)
		path := "messages?i=main&o=mail&type=back&after=" + strconv.FormatInt(rows[len(rows)-3]-1, 10)
		deleted := map[int64]bool{}
		var seen []int64
		for page := 0; path != ""; page++ {
			if page > 10 {
				t.Fatal("more than 10 pages")
			}
			body := f.mustGet(path)
			got := listed(body)
			seen = append(got, seen...)
			path = ""
			if m := linkRE.FindStringSubmatch(body); m != nil {
				path = unescape(m[1])
			}
			if len(got) == 0 {
				break
			}
			// The first row shown goes, and the last row not yet shown before it.
			for _, id := range []int64{got[0]} {
				if _, err := f.ob.Discard(ctx, "mail", id); err != nil {
					t.Fatal(err)
				}
				deleted[id] = true
			}
			for i := len(rows) - 1; i >= 0; i-- {
				if rows[i] < got[0] && !deleted[rows[i]] {
					if _, err := f.ob.Discard(ctx, "mail", rows[i]); err != nil {
						t.Fatal(err)
					}
					deleted[rows[i]] = true
					break
				}
			}
		}
		if !slices.IsSorted(seen) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
			t.Fatalf("the walk back listed %v: out of order or twice", seen)
		}
		for _, id := range rows[:len(rows)-3] {
			if !deleted[id] && !slices.Contains(seen, id) {
				t.Errorf("row %d lived through the walk back and was not listed (listed %v, deleted %v)", id, seen, deleted)
			}
		}
	})
}

// TestAttackBulkWhileMessagesDie: messages keep dying while a bulk discard of the dead is
// confirmed and carried out: it discards exactly the messages its confirmation counted,
// every one of them, and no other.
func TestAttackBulkWhileMessagesDie(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, batchSize(7))
		ctx := context.Background()
		all := failAll{}
		ob, err := core.New(core.Config{DB: db.DB, Dialect: db.Dialect, Table: table, Manual: true, Codec: rawCodec,
			Outboxes: map[string]core.OutboxConfig{"mail": {Relay: all, MaxAttempts: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		died := make(chan error, 1)
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					died <- nil
					return
				default:
				}
				if _, err := ob.Publish(ctx, db.DB, msg{"mail", "dies", []byte(strconv.Itoa(i))}); err != nil {
					died <- err
					return
				}
				if _, err := ob.Drain(ctx, "mail"); err != nil {
					died <- err
					return
				}
			}
		}()
		for f.counts("mail").Dead < 20 {
			select {
			case err := <-died:
				t.Fatalf("the publisher stopped: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		_, confirmed := f.confirmation(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}})
		var counted []int64
		for _, v := range strings.Split(confirmed.Get("id"), ",") {
			id, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("the confirmation's IDs: %q", confirmed.Get("id"))
			}
			counted = append(counted, id)
		}
		n := f.done(confirmed)
		left := listed(f.mustGet("messages?i=main&o=mail&state=dead"))
		for len(left) == 0 { // until one more dies: the discard must leave it
			select {
			case err := <-died:
				t.Fatalf("the publisher stopped: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
			left = listed(f.mustGet("messages?i=main&o=mail&state=dead"))
		}
		close(stop)
		if err := <-died; err != nil {
			t.Fatal(err)
		}
		if n != int64(len(counted)) {
			t.Errorf("discarded %d; the confirmation counted %d", n, len(counted))
		}
		for _, id := range left {
			if slices.Contains(counted, id) {
				t.Errorf("message %d was counted and is still dead", id)
			}
		}
	})
}

// failAll is a relay that fails every message.
type failAll struct{}

func (failAll) Deliver(_ context.Context, batch []core.Envelope) error {
	pf := &core.PartialFailure{Failed: map[int64]error{}}
	for _, e := range batch {
		pf.Failed[e.ID] = errorString("refused")
	}
	return pf
}

// TestAttackSpoofedReport: a link that carries the report of an action that never ran
// does not make the page say it ran.
func TestAttackSpoofedReport(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		for _, p := range []string{"outbox?i=main&o=orders&done=discard&n=48211&b=97", "outbox?i=main&o=orders&done=resume",
			"messages?i=main&o=mail&state=dead&done=retry&n=3&b=1&s=00000000000000000000000000000000"} {
			mustNotContain(t, p, f.mustGet(p), `id="flash"`, "Discarded", "Resumed", "Retried")
		}
		loc := f.act(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"ids"}, "id": ids(f.dead[0])}, "Delete 1 message")
		mustContain(t, "the page after a discard", f.mustGet(loc), "Discarded 1 message (1 batch).")
		// Its report, with another number, is not shown.
		u, _ := url.Parse(loc)
		q := u.Query()
		q.Set("n", "5000")
		u.RawQuery = q.Encode()
		mustNotContain(t, "the report with another number", f.mustGet(u.String()), `id="flash"`)
	})
}
