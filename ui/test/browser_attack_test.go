package uitest

import (
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
