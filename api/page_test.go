package api_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/api"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps/orderapi"
)

// chromiumInstall is the line CI runs so the page tests find a browser.
const chromiumInstall = "apt-get update && apt-get install -y chromium"

// chromium returns the headless browser's path or fails the test: the
// status page is tested in a real browser, in CI (CI=true) and everywhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("headless Chromium is required for the status page test and was not found on PATH (CI=%q); install it: %s", os.Getenv("CI"), chromiumInstall)
	return ""
}

// browse runs headless Chromium on url with extra flags and returns stdout.
func browse(t *testing.T, bin string, extra ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir()}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, errb.String())
	}
	return out.String()
}

// visible strips tags, so assertions are about the text a person reads.
func visible(dom string) string {
	var b strings.Builder
	in := false
	for _, r := range dom {
		switch {
		case r == '<':
			in = true
			b.WriteByte(' ')
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(strings.NewReplacer("&gt;", ">", "&lt;", "<", "&amp;", "&", "&#34;", `"`, "&#39;", "'").Replace(b.String())), " ")
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not show %q", what, w)
		}
	}
}

// TestStatusPageInChromium loads the list and the detail pages of real
// sagas (a completed, a compensated and a failed one) in headless Chromium
// and checks what a person sees. With SAGAFLOW_SCREENSHOT_DIR set it also
// saves status-page.png and saga-timeline.png there.
func TestStatusPageInChromium(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	env := newOpsEnv(t, nil)
	completed, compensated, failed := env.threeSagas(t)
	env.start(t, "order-running")

	listURL := env.srv.URL + "/ui/sagas"
	list := visible(browse(t, bin, "--dump-dom", listURL))
	mustContain(t, "the list page", list, completed.String(), compensated.String(), failed.String(),
		"completed", "compensated", "failed", "running", orderapi.StepReserveInventory, orderapi.StepCreateShipment, "stuck only", "outbox pending")

	stuckDOM := browse(t, bin, "--dump-dom", listURL+"?stuck=true")
	if stuck := visible(stuckDOM); !strings.Contains(stuck, failed.String()) || strings.Contains(stuck, completed.String()) || strings.Contains(stuck, compensated.String()) {
		t.Errorf("the stuck filter shows %q; want the failed saga only", stuck)
	}
	if !strings.Contains(stuckDOM, `type="checkbox" name="stuck" value="true" checked`) {
		t.Errorf("the stuck checkbox is not kept checked on the filtered page")
	}

	detailURL := env.srv.URL + "/ui/sagas/" + failed.String()
	detailDOM := browse(t, bin, "--dump-dom", detailURL)
	detail := visible(detailDOM)
	mustContain(t, "the failed saga's page", detail, failed.String(), "failed", "PIVOT · no return",
		orderapi.StepReserveInventory, orderapi.StepLockCoupon, orderapi.StepChargePayment, orderapi.StepCreateShipment, orderapi.StepAwardPoints, orderapi.StepConfirmStock,
		"carrier refused: address unknown", "Retry now", "Compensate now", "Resolve", "Admin token", "Journal", "step failed")
	pivotRow := detailDOM[strings.Index(detailDOM, `data-step="`+orderapi.StepChargePayment+`"`):]
	pivotRow = pivotRow[:strings.Index(pivotRow, "</tr>")]
	if !strings.Contains(pivotRow, "PIVOT") || !strings.Contains(detailDOM, `class="step pivot"`) {
		t.Errorf("the pivot marker is not on the charge-payment row: %s", pivotRow)
	}

	compDOM := browse(t, bin, "--dump-dom", env.srv.URL+"/ui/sagas/"+compensated.String())
	mustContain(t, "the compensated saga's page", visible(compDOM), "compensated", "card declined: insufficient funds", "undo ")
	if !strings.Contains(compDOM, `class="b comp"`) {
		t.Errorf("the compensated saga's timeline has no compensation bar")
	}

	if dir := os.Getenv("SAGAFLOW_SCREENSHOT_DIR"); dir != "" {
		for _, shot := range []struct{ name, url, size string }{
			{"status-page.png", listURL, "1280,900"},
			{"saga-timeline.png", env.srv.URL + "/ui/sagas/" + compensated.String(), "1280,1500"},
		} {
			path, err := filepath.Abs(filepath.Join(dir, shot.name))
			if err != nil {
				t.Fatal(err)
			}
			browse(t, bin, "--hide-scrollbars", "--window-size="+shot.size, "--screenshot="+path, shot.url)
			if fi, err := os.Stat(path); err != nil || fi.Size() < 10_000 {
				t.Errorf("screenshot %s: %v", path, err)
			}
		}
	}
}

// TestStatusPageActionForms posts the detail page's forms as a browser
// does: a wrong or missing token and a refused action answer a readable page
// with 401/403/409 and change nothing; a good one redirects to the journal.
func TestStatusPageActionForms(t *testing.T) {
	t.Parallel()
	env := newOpsEnv(t, nil)
	_, _, failed := env.threeSagas(t)
	noRedirect := *env.srv.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	post := func(srvURL, action string, form url.Values) (int, string, string) {
		t.Helper()
		res, err := noRedirect.PostForm(srvURL+"/ui/sagas/"+failed.String()+"/actions/"+action, form)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, visible(string(b)), res.Header.Get("Location")
	}
	before := journalOf(t, env, failed)
	form := url.Values{"actor": {"bob"}, "reason": {"shipment booked by phone"}, "outcome": {"completed"}}

	f := url.Values{}
	maps.Copy(f, form)
	f.Set("token", "wrong")
	if st, page, _ := post(env.srv.URL, "resolve", f); st != http.StatusUnauthorized || !strings.Contains(page, "The admin token is missing or wrong. Nothing was changed.") {
		t.Fatalf("wrong token: %d %q", st, page)
	}
	f.Set("token", opsToken)
	if st, page, _ := post(env.srv.URL, "compensate", f); st != http.StatusConflict || !strings.Contains(page, "compensate refused") || !strings.Contains(page, "only a running saga can be compensated") {
		t.Fatalf("compensate a failed saga: %d %q", st, page)
	}
	f.Set("reason", "")
	if st, page, _ := post(env.srv.URL, "resolve", f); st != http.StatusBadRequest || !strings.Contains(page, "reason is required") {
		t.Fatalf("resolve without a reason: %d %q", st, page)
	}
	disabledSrv := httptest.NewServer(newAPI(t, env.eng, &api.Config{}))
	defer disabledSrv.Close()
	disabled := disabledSrv.URL
	f.Set("reason", "x")
	if st, page, _ := post(disabled, "resolve", f); st != http.StatusForbidden || !strings.Contains(page, "Operator actions are disabled") {
		t.Fatalf("actions disabled: %d %q", st, page)
	}
	// A repair asks first: without the confirmation box it changes nothing.
	g := url.Values{"actor": {"bob"}, "reason": {"carrier back"}, "step": {"create-shipment"}, "token": {opsToken}}
	if st, page, _ := post(env.srv.URL, "resume", g); st != http.StatusBadRequest || !strings.Contains(page, "tick the confirmation box") {
		t.Fatalf("resume without confirmation: %d %q", st, page)
	}
	g.Set("confirm", "yes")
	g.Set("step", "no-such-step")
	if st, page, _ := post(env.srv.URL, "resume", g); st != http.StatusConflict || !strings.Contains(page, "resume refused") || !strings.Contains(page, "no step") {
		t.Fatalf("resume at an unknown step: %d %q", st, page)
	}
	if after := journalOf(t, env, failed); after != before {
		t.Fatalf("refused actions changed the journal:\nbefore %s\nafter  %s", before, after)
	}

	f = url.Values{}
	maps.Copy(f, form)
	f.Set("token", opsToken)
	st, _, loc := post(env.srv.URL, "resolve", f)
	if st != http.StatusSeeOther || loc != "/ui/sagas/"+failed.String()+"?done=resolve" {
		t.Fatalf("resolve: %d location %q; want 303 to the saga page", st, loc)
	}
	res, err := env.srv.Client().Get(env.srv.URL + loc)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	mustContain(t, "the page after resolve", visible(string(b)), "Operator action \"resolve\" applied", "operator resolve", "bob", "shipment booked by phone", "failed → completed")
}

// journalOf is saga id's journal as JSON, to compare before and after.
func journalOf(t *testing.T, env *opsEnv, id uuid.UUID) string {
	t.Helper()
	var v api.SagaView
	env.getJSON(t, "/sagas/"+id.String(), &v)
	b, err := json.Marshal(struct {
		Version int64
		State   saga.State
		Journal []saga.JournalEntry
	}{v.Version, v.State, v.Journal})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
