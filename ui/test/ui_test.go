package uitest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxer-go/outboxer/dbtest"
)

// mustContain fails unless body holds every string of want.
func mustContain(t *testing.T, what, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Fatalf("%s does not show %q:\n%s", what, w, body)
		}
	}
}

func mustNotContain(t *testing.T, what, body string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(body, b) {
			t.Fatalf("%s shows %q:\n%s", what, b, body)
		}
	}
}

// hostile are the strings that must never reach a page unescaped.
var hostile = []string{hostileScript, hostileImg, hostileGroup, hostileError, hostileHeader, "<img", "<script>alert", "<b onclick"}

func TestOverview(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		resp, err := f.client.Get(f.base)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "default-src 'none'") {
			t.Fatalf("Content-Security-Policy %q allows more than the dashboard's own script", csp)
		}
		body := f.mustGet("")
		mustContain(t, "the overview", body, `href="outbox?i=main&amp;o=orders"`, `href="outbox?i=main&amp;o=mail"`, `data-refresh="10"`)
		// orders: 4 pending (g1's three and the scheduled one), 1 retrying, 1 scheduled, 0 dead.
		rowOf := func(name string) string {
			i := strings.Index(body, `o=`+name+`">`+name+`</a>`)
			if i < 0 {
				t.Fatalf("no row for %s:\n%s", name, body)
			}
			end := strings.Index(body[i:], "</tr>")
			return body[i : i+end]
		}
		nums := regexp.MustCompile(`state=(pending|retrying|scheduled|dead)">(\d+)<`)
		got := map[string]string{}
		for _, m := range nums.FindAllStringSubmatch(rowOf("orders"), -1) {
			got["orders "+m[1]] = m[2]
		}
		for _, m := range nums.FindAllStringSubmatch(rowOf("mail"), -1) {
			got["mail "+m[1]] = m[2]
		}
		want := map[string]string{"orders pending": "4", "orders retrying": "1", "orders scheduled": "1", "orders dead": "0",
			"mail pending": "0", "mail retrying": "0", "mail scheduled": "0", "mail dead": "3"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("overview %s = %q, want %s (all: %v)", k, got[k], v, got)
			}
		}
		// Mounted without the trailing slash, the dashboard sends the browser to it.
		rec := httptest.NewRecorder()
		http.StripPrefix("/admin/outbox", f.handler).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/outbox", nil))
		if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "outbox/" {
			t.Fatalf("GET /admin/outbox: %d to %q, want 301 to outbox/", rec.Code, rec.Header().Get("Location"))
		}
		for _, path := range []string{"static/app.css", "static/app.js"} {
			if code, _ := f.get(path); code != http.StatusOK {
				t.Fatalf("GET %s: %d", path, code)
			}
		}
	})
}

func TestOutboxPageShowsTheBlockedGroup(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		body := f.mustGet("outbox?i=main&o=orders")
		mustContain(t, "the outbox page", body, `id="blocked"`, `>g1</a>`, `href="message?i=main&amp;id=`+strconv.FormatInt(f.stuck, 10)+`&amp;o=orders"`,
			"broker said no: &lt;img src=x onerror=alert(4)&gt;", `<td class="n">2</td>`, `id="partitions"`, `id="pause"`)
		mustNotContain(t, "the outbox page", body, hostile...)
		// g3 waits behind its scheduled message alone; g2 was delivered.
		mustNotContain(t, "the outbox page", body, `>g2</a>`)
		if code, _ := f.get("outbox?i=main&o=nope"); code != http.StatusNotFound {
			t.Fatalf("an unknown outbox: %d, want 404", code)
		}
		if code, _ := f.get("outbox?i=other&o=orders"); code != http.StatusNotFound {
			t.Fatalf("an unknown instance: %d, want 404", code)
		}
	})
}

var rowIDRE = regexp.MustCompile(`<tr class="msg-row" id="m(\d+)">`)

func listed(body string) []int64 {
	var out []int64
	for _, m := range rowIDRE.FindAllStringSubmatch(body, -1) {
		id, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, id)
	}
	return out
}

func TestMessageListFilters(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		for _, c := range []struct {
			query string
			want  []int64
		}{
			{"o=orders", []int64{f.stuck, f.held1, f.held2, f.scheduled}},
			{"o=orders&state=retrying", []int64{f.stuck}},
			{"o=orders&state=scheduled", []int64{f.scheduled}},
			{"o=orders&type=order.paid", []int64{f.held1}},
			{"o=orders&group=g1", []int64{f.stuck, f.held1, f.held2}},
			{"o=orders&hk=tenant&hv=acme", []int64{f.stuck}},
			{"o=orders&hk=traceparent", []int64{f.stuck}},
			{"o=orders&min=" + strconv.FormatInt(f.held1, 10) + "&max=" + strconv.FormatInt(f.held2, 10), []int64{f.held1, f.held2}},
			{"o=orders&age=1h", nil},
			{"o=orders&err=broker+said", []int64{f.stuck}},
			{"o=orders&err=100%25", nil}, // % is a character, not a wildcard
			{"o=mail&state=dead", f.dead},
			{"o=mail&state=dead&group=" + url.QueryEscape(hostileGroup), f.dead[:1]},
			{"o=mail&state=dead&hk=tenant&hv=other", f.dead[1:2]},
			{"o=mail&state=dead&hk=" + url.QueryEscape(hostileHeader), f.dead[:1]},
			{"o=mail&state=pending", nil},
		} {
			body := f.mustGet("messages?i=main&" + c.query)
			if got := listed(body); !slices.Equal(got, c.want) {
				t.Errorf("messages?%s lists %v, want %v", c.query, got, c.want)
			}
			mustNotContain(t, "messages?"+c.query, body, hostile...)
		}
		body := f.mustGet("messages?i=main&o=mail&state=dead")
		mustContain(t, "the dead list", body, "&lt;script&gt;alert(1)&lt;/script&gt;", "smtp: &lt;img src=x onerror=alert(4)&gt;", "0001feff3c733e")
		for _, bad := range []string{"age=soon", "min=x", "state=lost"} {
			if code, _ := f.get("messages?i=main&o=orders&" + bad); code != http.StatusBadRequest {
				t.Errorf("messages?%s: %d, want 400", bad, code)
			}
		}
	})
}

func TestMessageListPagesByKey(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, pageSize(2))
		ctx := context.Background()
		tx, _ := db.BeginTx(ctx, nil)
		var all []int64
		for i := range 7 {
			env, err := f.ob.Publish(ctx, tx, msg{"mail", "mail.bulk", []byte(`{"n":` + strconv.Itoa(i) + `}`)})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, env.ID)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		nextRE := regexp.MustCompile(`href="(messages\?[^"]*)" id="(next|prev)"`)
		page := func(path string) ([]int64, map[string]string) {
			body := f.mustGet(unescape(path))
			links := map[string]string{}
			for _, m := range nextRE.FindAllStringSubmatch(body, -1) {
				links[m[2]] = m[1]
			}
			return listed(body), links
		}
		var walked []int64
		var pages [][]int64
		path := "messages?i=main&o=mail&type=mail.bulk"
		for range 10 {
			got, links := page(path)
			walked = append(walked, got...)
			pages = append(pages, got)
			if links["next"] == "" {
				break
			}
			path = links["next"]
		}
		if !slices.Equal(walked, all) || len(pages) != 4 {
			t.Fatalf("walking the pages forward: %v in %d pages, want %v in 4", walked, len(pages), all)
		}
		// Back from the last page, a page at a time.
		_, links := page(path)
		for i := len(pages) - 2; i >= 0; i-- {
			var got []int64
			got, links = page(links["prev"])
			if !slices.Equal(got, pages[i]) {
				t.Fatalf("page %d backward: %v, want %v", i, got, pages[i])
			}
		}
		if links["prev"] != "" {
			t.Fatalf("the first page links to a previous one: %q", links["prev"])
		}
	})
}

func TestMessagePage(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		body := f.mustGet("message?i=main&o=orders&id=" + strconv.FormatInt(f.stuck, 10))
		mustContain(t, "the blocked message", body,
			"JSON, "+strconv.Itoa(f.stuckSize)+" B", "\n  &#34;order&#34;: 1,\n", // indented
			`<dd id="trace-id"><code>4bf92f3577b34da6a3ce929d0e0e4736</code></dd>`,
			`<dd id="attempts">1</dd>`, "broker said no: &lt;img src=x onerror=alert(4)&gt;",
			`id="group-pending"`, // the group's table links both held messages:
			"id="+strconv.FormatInt(f.held1, 10)+`&amp;o=orders">`, "id="+strconv.FormatInt(f.held2, 10)+`&amp;o=orders">`,
			`id="retry">Retry now…`)
		mustNotContain(t, "the blocked message", body, hostile...)

		body = f.mustGet("message?i=main&o=mail&id=" + strconv.FormatInt(f.dead[0], 10))
		mustContain(t, "a dead text message", body, "text, 25 B", "&lt;script&gt;alert(1)&lt;/script&gt;", `id="retry">Retry…`,
			"&lt;b onclick=alert(5)&gt;h&lt;/b&gt;")
		mustNotContain(t, "a dead text message", body, hostile...)

		body = f.mustGet("message?i=main&o=mail&id=" + strconv.FormatInt(f.dead[2], 10))
		mustContain(t, "a binary message", body, "binary (hex), 7 B", "00 01 fe ff 3c 73 3e")
		mustNotContain(t, "a binary message", body, "<s>")

		if code, _ := f.get("message?i=main&o=mail&id=" + strconv.FormatInt(f.stuck, 10)); code != http.StatusNotFound {
			t.Fatalf("a message of another outbox: %d, want 404", code)
		}
	})
}

func TestRetryTheBlockingMessageDrainsTheGroup(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		// The relay works again; the message waits an hour for its retry, its group behind it.
		f.relay.heal()
		if res := f.drain("orders"); res.Delivered != 0 {
			t.Fatalf("before the retry, a drain delivered %d", res.Delivered)
		}
		loc := f.act(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"retry"}, "scope": {"ids"}, "id": ids(f.stuck)},
			"Make 1 message waiting for a retry due now", "IDs "+strconv.FormatInt(f.stuck, 10)+".", "Retry 1 message")
		mustContain(t, "the redirect", loc, "message?", "done=retry", "n=1")
		body := f.mustGet(loc)
		mustContain(t, "the page after the retry", body, "Retried 1 message (1 batch).")
		res := f.drain("orders")
		if res.Delivered != 3 {
			t.Fatalf("after the retry, a drain delivered %d, want the 3 messages of g1", res.Delivered)
		}
		if c := f.counts("orders"); c.Pending != 1 {
			t.Fatalf("orders pending %d, want 1 (the scheduled one)", c.Pending)
		}
		body = f.mustGet("outbox?i=main&o=orders")
		mustNotContain(t, "the outbox page after the retry", body, ">g1</a>")
	})
}

func TestRetryAndDiscardDead(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, batchSize(1))
		// One, selected.
		f.act(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"retry"}, "scope": {"ids"}, "id": ids(f.dead[0], f.stuck)},
			"Put 1 dead message back for delivery", "1 of the selected messages are neither dead")
		if c := f.counts("mail"); c.Pending != 1 || c.Dead != 2 {
			t.Fatalf("after retrying one: %+v, want 1 pending and 2 dead", c)
		}
		// All matching a filter, in batches of one.
		loc := f.act(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}, "hk": {"tenant"}, "hv": {"other"}},
			"Delete 1 message of outbox &#34;mail&#34;", `with header &#34;tenant&#34; = &#34;other&#34;`)
		mustContain(t, "the redirect", loc, "messages?", "done=discard", "n=1", "b=1", "state=dead")
		if c := f.counts("mail"); c.Pending != 1 || c.Dead != 1 {
			t.Fatalf("after discarding the filter: %+v, want 1 pending and 1 dead", c)
		}
		// Every dead message, in batches of one: a message that dies after the
		// confirmation is not touched.
		f.act(url.Values{"i": {"main"}, "o": {"mail"}, "op": {"retry"}, "scope": {"filter"}, "state": {"dead"}}, "Retry 1 message")
		if c := f.counts("mail"); c.Pending != 2 || c.Dead != 0 {
			t.Fatalf("after retrying every dead one: %+v, want 2 pending", c)
		}
		// Discard selected, whatever their state.
		f.act(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"discard"}, "scope": {"ids"}, "id": ids(f.stuck, f.held1)},
			"Delete 2 messages for good", "IDs "+strconv.FormatInt(f.stuck, 10)+", "+strconv.FormatInt(f.held1, 10)+".")
		f.relay.heal()
		if res := f.drain("orders"); res.Delivered != 1 {
			t.Fatalf("after discarding the blocking message, a drain delivered %d, want the last one of g1", res.Delivered)
		}
	})
}

func TestBulkActionStopsAtWhatWasConfirmed(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, batchSize(2))
		form := url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}, "csrf": {f.token()}}
		code, _, body := f.post("confirm", form)
		if code != http.StatusOK {
			t.Fatalf("confirm: %d\n%s", code, body)
		}
		mustContain(t, "the confirmation", body, "Delete 3 messages", "in batches of 2", "Discard 3 messages")
		// A message dies between the confirmation and the click: it is not discarded.
		ctx := context.Background()
		tx, _ := db.BeginTx(ctx, nil)
		late, err := f.ob.Publish(ctx, tx, msg{"mail", "mail.send", []byte("late")})
		if err != nil {
			t.Fatal(err)
		}
		tx.Commit()
		f.relay.fail(late.ID, errorString("late failure"))
		f.drain("mail")
		confirmed := url.Values{}
		for _, m := range hiddenRE.FindAllStringSubmatch(body[strings.Index(body, `action="do"`):], -1) {
			confirmed.Add(m[1], unescape(m[2]))
		}
		code, loc, _ := f.post("do", confirmed)
		if code != http.StatusSeeOther || !strings.Contains(loc, "n=3") || !strings.Contains(loc, "b=2") {
			t.Fatalf("do: %d to %q, want 3 discarded in 2 batches", code, loc)
		}
		if c := f.counts("mail"); c.Dead != 1 {
			t.Fatalf("dead after the discard: %d, want the one that died after the confirmation", c.Dead)
		}
	})
}

type errorString string

func (e errorString) Error() string { return string(e) }

func TestPauseAndResume(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		loc := f.act(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"pause"}}, "Stop delivering outbox &#34;orders&#34;", "Pause</button>")
		body := f.mustGet(loc)
		mustContain(t, "the outbox page after the pause", body, `id="paused"`, `id="resume"`, "Paused: delivery stops")
		h, err := f.ob.Health(context.Background(), "orders")
		if err != nil || !h.Outboxes[0].Paused {
			t.Fatalf("after the pause, health says paused=%v (err %v)", h.Outboxes[0].Paused, err)
		}
		mustContain(t, "the overview", f.mustGet(""), `<span class="badge paused">paused</span>`)
		f.act(url.Values{"i": {"main"}, "o": {"orders"}, "op": {"resume"}}, "Restart delivering")
		h, err = f.ob.Health(context.Background(), "orders")
		if err != nil || h.Outboxes[0].Paused {
			t.Fatalf("after the resume, health says paused=%v (err %v)", h.Outboxes[0].Paused, err)
		}
	})
}

func TestChangesNeedTheCSRFToken(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db)
		token := f.token()
		form := func(tok string) url.Values {
			return url.Values{"i": {"main"}, "o": {"mail"}, "op": {"discard"}, "scope": {"filter"}, "state": {"dead"}, "upto": {"1000000"}, "csrf": {tok}}
		}
		for _, c := range []struct {
			name   string
			form   url.Values
			header []string
		}{
			{"no token", form(""), nil},
			{"a wrong token", form(strings.Repeat("0", 64)), nil},
			{"another browser's token", form(token), []string{"Cookie", "outboxerui_csrf=" + strings.Repeat("a", 64)}},
			{"a cross-site request", form(token), []string{"Sec-Fetch-Site", "cross-site"}},
			{"another origin", form(token), []string{"Origin", "https://evil.example"}},
		} {
			for _, path := range []string{"confirm", "do"} {
				if len(c.header) > 0 && c.header[0] == "Cookie" {
					// A client with no cookie jar of ours: only the forged cookie.
					req, _ := http.NewRequest(http.MethodPost, f.base+path, strings.NewReader(c.form.Encode()))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					req.Header.Set(c.header[0], c.header[1])
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusForbidden {
						t.Errorf("%s to %s: %d, want 403", c.name, path, resp.StatusCode)
					}
					continue
				}
				if code, _, _ := f.post(path, c.form, c.header...); code != http.StatusForbidden {
					t.Errorf("%s to %s: %d, want 403", c.name, path, code)
				}
			}
		}
		if c := f.counts("mail"); c.Dead != 3 {
			t.Fatalf("refused requests changed something: %+v", c)
		}
	})
}

func TestReadOnly(t *testing.T) {
	dbtest.ForEach(t, func(t *testing.T, db *dbtest.DB) {
		f := newFixture(t, db, readOnly)
		for _, path := range []string{"", "outbox?i=main&o=orders", "messages?i=main&o=mail&state=dead",
			"message?i=main&o=mail&id=" + strconv.FormatInt(f.dead[0], 10)} {
			body := f.mustGet(path)
			mustContain(t, path, body, `id="read-only"`)
			mustNotContain(t, path, body, `method="post"`, "Retry…", "Retry now…", "Discard…", "Pause…", "Retry selected", "Discard all")
		}
		// A token from a page that would have one: the server refuses whatever the request carries.
		for _, op := range []string{"discard", "retry", "pause"} {
			form := url.Values{"i": {"main"}, "o": {"mail"}, "op": {op}, "scope": {"filter"}, "state": {"dead"}, "upto": {"1000000"}}
			for _, path := range []string{"confirm", "do"} {
				if code, _, _ := f.post(path, form); code != http.StatusForbidden {
					t.Errorf("read-only %s to %s: %d, want 403", op, path, code)
				}
			}
		}
		if c := f.counts("mail"); c.Dead != 3 {
			t.Fatalf("a read-only dashboard changed something: %+v", c)
		}
	})
}
