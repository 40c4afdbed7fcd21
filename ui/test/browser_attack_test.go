package uitest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/outboxer-go/outboxer/core"
	"github.com/outboxer-go/outboxer/dbtest"
)

// TestAttackBrowserHostileNames: in a real browser, an outbox name that closes the title,
// a type with an SVG handler, a javascript: group key, a header that closes a style
// element, and payloads closing script and pre elements neither run nor inject anything,
// on every page that shows them.
func TestAttackBrowserHostileNames(t *testing.T) {
	db := dbtest.Postgres(t)
	f := newFixture(t, db)
	ctx, dialogs := browser(t)
	const box = `</title><script>alert(6)</script>`
	css := `</style><style>body{background:red}</style>`
	id := f.publishTo(box, []msg{
		{typ: `"><svg onload=alert(7)>`, body: []byte(`{"html":"</script><script>alert(9)</script>"}`)},
		{typ: `<img src=x onerror=alert(8)>`, body: []byte("</pre><script>alert(10)</script><pre>")},
	}, []core.PublishOption{core.WithGroupKey(`javascript:alert(11)`), core.WithHeaders(map[string]string{css: css, "link": "javascript:alert(12)"})})
	o := url.QueryEscape(box)
	for _, p := range []string{"", "outbox?i=main&o=" + o, "messages?i=main&o=" + o,
		"message?i=main&o=" + o + "&id=" + strconv.FormatInt(id[0], 10), "message?i=main&o=" + o + "&id=" + strconv.FormatInt(id[1], 10),
		"messages?i=main&o=" + o + "&group=" + url.QueryEscape(`javascript:alert(11)`)} {
		run(t, ctx, "open "+p, chromedp.Navigate(f.base+p), chromedp.WaitVisible(chromedp.CSS(`main`)))
		injected := eval[int](t, ctx, `document.querySelectorAll("svg, img, style, script:not([src]), [onload], [onerror], [onmouseover], a[href^='javascript:' i]").length`)
		if injected != 0 {
			t.Errorf("%s: %d injected elements", p, injected)
		}
		if bg := eval[string](t, ctx, `getComputedStyle(document.body).backgroundColor`); bg == "rgb(255, 0, 0)" {
			t.Errorf("%s: the injected style applies", p)
		}
		if shown := eval[string](t, ctx, `document.querySelector("main").textContent`); !strings.Contains(shown, box) {
			t.Errorf("%s does not show the outbox name as text:\n%s", p, shown)
		}
		if strings.HasPrefix(p, "outbox") || strings.HasPrefix(p, "messages") {
			if title := eval[string](t, ctx, `document.title`); !strings.Contains(title, box) {
				t.Errorf("%s: the title is %q, want it to show the outbox name as text", p, title)
			}
		}
	}
	run(t, ctx, "hostile names screenshot", shot(t, "hostile-names"))
	if n := dialogs.Load(); n != 0 {
		t.Fatalf("the pages opened %d JavaScript dialogs", n)
	}
}

// TestAttackBrowserLinkFromElsewhere: the operator has the dashboard open, follows a link
// to it from another site (an alert, a chat), then acts in the tab opened first. The
// action must not be refused for its CSRF token: the link from elsewhere must not have
// replaced the browser's CSRF cookie.
func TestAttackBrowserLinkFromElsewhere(t *testing.T) {
	db := dbtest.Postgres(t)
	f := newFixture(t, db)
	ctx, _ := browser(t)
	// Another site: the same machine by another name is another site for the browser.
	target := strings.Replace(f.base, "127.0.0.1", "localhost", 1) + "outbox?i=main&o=orders"
	alert := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><a id="go" href="%s">the outbox</a>`, target)
	}))
	defer alert.Close()
	home := strings.Replace(f.base, "127.0.0.1", "localhost", 1)
	run(t, ctx, "open the outbox page",
		chromedp.Navigate(home+"outbox?i=main&o=orders"), chromedp.WaitVisible(chromedp.CSS(`#pause`)))
	// The first tab's form, kept as it is while the operator looks elsewhere.
	form := eval[string](t, ctx, `document.querySelector("input[name=csrf]").value`)
	run(t, ctx, "follow the link from the alert",
		chromedp.Navigate(alert.URL), chromedp.WaitVisible(chromedp.CSS(`#go`)),
		chromedp.Click(chromedp.CSS(`#go`)), chromedp.WaitVisible(chromedp.CSS(`#pause`)))
	// Back in the first tab: its token, posted from the dashboard's own page.
	run(t, ctx, "act in the first tab", chromedp.Navigate(home+"outbox?i=main&o=orders"), chromedp.WaitVisible(chromedp.CSS(`#pause`)))
	eval[bool](t, ctx, `(document.querySelector("input[name=csrf]").value = `+strconv.Quote(form)+`, true)`)
	run(t, ctx, "pause with the first tab's token", chromedp.Click(chromedp.CSS(`#pause`)), chromedp.WaitVisible(chromedp.CSS(`#summary, #error`)))
	if body := eval[string](t, ctx, `document.querySelector("main").textContent`); !strings.Contains(body, "Stop delivering") {
		t.Fatalf("the first tab's action was refused after a link from another site:\n%s", body)
	}
}

// TestAttackBrowserCrossSiteForm: a page of another site whose form posts to the
// dashboard, clicked by an operator whose browser has the dashboard's cookie, changes
// nothing, with or without a token of its own making.
func TestAttackBrowserCrossSiteForm(t *testing.T) {
	db := dbtest.Postgres(t)
	f := newFixture(t, db)
	ctx, _ := browser(t)
	home := strings.Replace(f.base, "127.0.0.1", "localhost", 1)
	run(t, ctx, "open the dashboard", chromedp.Navigate(home+"outbox?i=main&o=orders"), chromedp.WaitVisible(chromedp.CSS(`#pause`)))
	token := eval[string](t, ctx, `document.querySelector("input[name=csrf]").value`)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		// Even a token stolen from the page (it cannot be, but suppose) does not help.
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%sdo"><input name="i" value="main"><input name="o" value="orders">`+
			`<input name="op" value="pause"><input name="csrf" value="%s"><button id="go">win a prize</button></form>`, home, token)
	}))
	defer evil.Close()
	run(t, ctx, "click the other site's form", chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS(`#go`)), chromedp.Click(chromedp.CSS(`#go`)))
	waitFor(t, ctx, `location.href.includes("/do") && document.readyState === "complete"`)
	if body := eval[string](t, ctx, `document.body.textContent`); !strings.Contains(body, "cross-origin") && !strings.Contains(body, "CSRF") {
		t.Fatalf("the other site's form was not refused by the dashboard:\n%s", body)
	}
	if h, err := f.ob.Health(context.Background(), "orders"); err != nil || h.Outboxes[0].Paused {
		t.Fatalf("a form of another site paused the outbox (err %v)", err)
	}
}
