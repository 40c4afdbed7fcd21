package uitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/outboxer-go/outboxer/dbtest"
)

// screenshots is where the browser tests save their screenshots (git-ignored).
const screenshots = "screenshots"

// browser starts a headless Chromium (Debian's chromium, installed by make deps) and
// returns a context driving one tab, and a count of the JavaScript dialogs the pages
// opened (each dismissed at once). Without chromium the test skips, or fails under CI.
func browser(t *testing.T) (context.Context, *atomic.Int64) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("chromium is missing in CI (scripts/chromium.sh installs it): %v", err)
		}
		t.Skipf("chromium is missing (run scripts/chromium.sh): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first action starts the browser: under the browser's own context, not under
	// the timeout of the steps.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	dialogs := &atomic.Int64{}
	opening := chromedp.Events(bctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range opening {
			if err != nil {
				return
			}
			dialogs.Add(1)
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, dialogs
}

func shot(t *testing.T, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		buf, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(screenshots, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(screenshots, name+".png"), buf, 0o644)
	})
}

func run(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// text reads the text of the first element sel matches.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it holds.
func waitFor(t *testing.T, ctx context.Context, cond string) {
	t.Helper()
	for range 200 {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond)); err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("waited 10s for %s", cond)
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

func TestBrowser(t *testing.T) {
	db := dbtest.Postgres(t)
	f := newFixture(t, db)
	ctx, dialogs := browser(t)

	// Overview → the stuck group → its blocking message.
	run(t, ctx, "open the overview",
		chromedp.Navigate(f.base),
		chromedp.WaitVisible(chromedp.CSS(`#outboxes-main`)),
		shot(t, "overview"),
		chromedp.Click(chromedp.CSS(`a.outbox-link[href="outbox?i=main&o=orders"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#blocked`)),
		shot(t, "outbox"),
	)
	if g := text(t, ctx, `#blocked a.group-link`); g != "g1" {
		t.Fatalf("the first blocked group is %q, want g1", g)
	}
	run(t, ctx, "follow the blocking message",
		chromedp.Click(chromedp.CSS(`#blocked a.blocking-link`)),
		chromedp.WaitVisible(chromedp.CSS(`#payload`)),
		shot(t, "message"),
	)
	if a := text(t, ctx, `#attempts`); a != "1" {
		t.Fatalf("the blocking message shows %q attempts, want 1", a)
	}
	if e := text(t, ctx, `#last-error`); e != "broker said no: "+hostileError {
		t.Fatalf("the blocking message's last error shows as %q", e)
	}

	// Retry it, with the confirmation; the relay works again, the group drains.
	f.relay.heal()
	run(t, ctx, "retry", chromedp.Click(chromedp.CSS(`#retry`)), chromedp.WaitVisible(chromedp.CSS(`#summary`)), shot(t, "confirm"))
	if s := text(t, ctx, `#summary`); !strings.Contains(s, "Make 1 message waiting for a retry due now") {
		t.Fatalf("the confirmation says %q", s)
	}
	run(t, ctx, "confirm the retry", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if s := text(t, ctx, `#flash`); s != "Retried 1 message (1 batch)." {
		t.Fatalf("after the retry the page says %q", s)
	}
	if res := f.drain("orders"); res.Delivered != 3 {
		t.Fatalf("after the retry, a drain delivered %d, want g1's 3", res.Delivered)
	}
	run(t, ctx, "see the group gone",
		chromedp.Navigate(f.base+"outbox?i=main&o=orders"),
		chromedp.WaitVisible(chromedp.CSS(`#partitions`)),
	)
	groups := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("a.group-link")).map(a => a.textContent)`)
	for _, g := range groups {
		if g == "g1" {
			t.Fatalf("g1 is still blocked after the retry: %v", groups)
		}
	}

	// Discard from a filtered list.
	run(t, ctx, "filter the dead list",
		chromedp.Navigate(f.base+"messages?i=main&o=mail&state=dead"),
		chromedp.WaitVisible(chromedp.CSS(`#messages`)),
		chromedp.SendKeys(chromedp.CSS(`#filters input[name=hk]`), "tenant"),
		chromedp.SendKeys(chromedp.CSS(`#filters input[name=hv]`), "other"),
		chromedp.Click(chromedp.CSS(`#apply`)),
	)
	// The list before the filter has the same table: wait for the filtered page.
	waitFor(t, ctx, `location.search.includes("hv=other") && document.readyState === "complete"`)
	run(t, ctx, "see the filtered list", chromedp.WaitVisible(chromedp.CSS(`#messages`)), shot(t, "messages"))
	rows := eval[int](t, ctx, `document.querySelectorAll("tr.msg-row").length`)
	if rows != 1 {
		t.Fatalf("the filtered list shows %d rows, want 1", rows)
	}
	run(t, ctx, "discard all matching", chromedp.Click(chromedp.CSS(`#discard-all`)), chromedp.WaitVisible(chromedp.CSS(`#summary`)))
	if s := text(t, ctx, `#summary`); !strings.Contains(s, `Delete 1 message of outbox "mail"`) || !strings.Contains(s, `with header "tenant" = "other"`) {
		t.Fatalf("the confirmation says %q", s)
	}
	run(t, ctx, "confirm the discard", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if s := text(t, ctx, `#flash`); s != "Discarded 1 message (1 batch)." {
		t.Fatalf("after the discard the page says %q", s)
	}
	if c := f.counts("mail"); c.Dead != 2 {
		t.Fatalf("mail has %d dead after the discard, want 2", c.Dead)
	}

	// Pause and resume.
	run(t, ctx, "pause",
		chromedp.Navigate(f.base+"outbox?i=main&o=orders"),
		chromedp.Click(chromedp.CSS(`#pause`)), chromedp.WaitVisible(chromedp.CSS(`#summary`)),
		chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#paused`)),
	)
	if h, err := f.ob.Health(context.Background(), "orders"); err != nil || !h.Outboxes[0].Paused {
		t.Fatalf("not paused after the pause (err %v)", err)
	}
	run(t, ctx, "resume",
		chromedp.Click(chromedp.CSS(`#resume`)), chromedp.WaitVisible(chromedp.CSS(`#summary`)),
		chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#pause`)),
	)
	if h, err := f.ob.Health(context.Background(), "orders"); err != nil || h.Outboxes[0].Paused {
		t.Fatalf("still paused after the resume (err %v)", err)
	}

	// The hostile payloads, group keys, headers and errors did not execute or inject.
	for _, p := range []string{
		"messages?i=main&o=mail&state=dead",
		"message?i=main&o=mail&id=" + ids(f.dead[0])[0],
		"message?i=main&o=mail&id=" + ids(f.dead[1])[0],
		"message?i=main&o=orders&id=" + ids(f.stuck)[0],
	} {
		run(t, ctx, "open "+p, chromedp.Navigate(f.base+p), chromedp.WaitVisible(chromedp.CSS(`main`)))
		injected := eval[int](t, ctx, `document.querySelectorAll("img, b, script:not([src]), [onerror], [onclick]").length`)
		if injected != 0 {
			t.Fatalf("%s: %d injected elements", p, injected)
		}
	}
	run(t, ctx, "hostile screenshot", shot(t, "hostile"))
	run(t, ctx, "open the script payload", chromedp.Navigate(f.base+"message?i=main&o=mail&id="+ids(f.dead[0])[0]))
	shown := text(t, ctx, `#payload`)
	if shown != hostileScript {
		t.Fatalf("the hostile payload shows as %q, want it as text", shown)
	}
	if n := dialogs.Load(); n != 0 {
		t.Fatalf("the pages opened %d JavaScript dialogs", n)
	}
}
