package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// statusGet fetches url with the Authorization header auth ("": none).
func statusGet(t *testing.T, url, auth string) (*http.Response, string) {
	t.Helper()
	return fetchStatus(t, http.MethodGet, url, auth)
}

func mustNotContain(t *testing.T, what, text string, unwanted ...string) {
	t.Helper()
	for _, u := range unwanted {
		if strings.Contains(text, u) {
			t.Errorf("%s: %q shown:\n%s", what, u, text)
		}
	}
}

// TestStatusAccess: with admin and client tokens set, /status refuses a
// reader without a token or with a wrong one (401 saying how to pass one,
// counted in idgen_auth_failures_total{method="/status"}); the admin token
// (bearer or basic-auth password) shows the whole page; the client token
// the node, channels, slot and members, without the businesses, the
// refusals and the session id; --status-public shows state and channel
// readiness to everyone; a node without tokens says the page is open.
// (The code before this test showed the whole page to anyone.)
func TestStatusAccess(t *testing.T) {
	const adminTok, clientTok = "the-admin-token-0123456789abcdef", "the-client-token-0123456789abcdef"
	nd, h, _ := startStatusNode(t, adminTok)
	ctx := context.Background()
	tok := adminTok
	if _, err := h.CreateBiz(ctx, &idl.CreateBizRequest{Name: "payroll", Description: ptr("salaries"), Token: &tok}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.NextIDs(ctx, &idl.NextIDsRequest{Biz: "payroll", Count: 20_000}); err == nil {
		t.Fatal("a count over max_batch was served")
	}
	serve := func(a statusAccess) (*httptest.Server, *metrics) {
		nd.access = a // before the server's goroutines exist
		m := newMetrics()
		srv := httptest.NewServer(newStatusPage(nd, m, zap.NewNop()))
		t.Cleanup(srv.Close)
		return srv, m
	}
	private := []string{"payroll", "salaries", "above max_batch", "Refusals", "Businesses"}

	srv, m := serve(statusAccess{admin: adminTok, client: clientTok})
	for _, c := range []struct{ name, auth, want string }{
		{"no token", "", "/status needs a token"},
		{"wrong bearer token", "Bearer not-the-token-0123456789", "wrong token for /status"},
		{"wrong basic password", basicAuth("ops", "not-the-token"), "wrong token for /status"},
		{"the admin token as a user name", basicAuth(adminTok, ""), "wrong token for /status"},
	} {
		resp, body := statusGet(t, srv.URL, c.auth)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s: %d, WWW-Authenticate %q; want 401 with a basic challenge", c.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		mustContain(t, c.name, body, c.want, "Authorization: Bearer", "--status-public")
		mustNotContain(t, c.name, body, append(private, "serving")...)
	}
	if n := counterValue(t, m, "idgen_auth_failures_total", "method=/status"); n != 4 {
		t.Errorf("idgen_auth_failures_total{method=/status} = %v, want 4", n)
	}
	for _, auth := range []string{"Bearer " + adminTok, "bearer " + adminTok, basicAuth("anyone", adminTok)} {
		resp, body := statusGet(t, srv.URL, auth)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("admin token (%.6s...): %d", auth, resp.StatusCode)
		}
		checkStatusHeaders(t, resp)
		text := pageText(body)
		mustContain(t, "admin view", text, "idgen serving", "Worker slot", "Members (1)", "Businesses (1)", "payroll", "salaries",
			"Refusals (1 since start)", "above max_batch", "pid")
		mustNotContain(t, "admin view", text, "Client view", "Public summary", "open to anyone")
	}
	resp, body := statusGet(t, srv.URL, "Bearer "+clientTok)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client token: %d", resp.StatusCode)
	}
	text := pageText(body)
	mustContain(t, "client view", text, "Client view", "idgen serving", "snowflake serving yes", "Worker slot", "worker 7", "Members (1)")
	mustNotContain(t, "client view", text, append(private, "session")...)

	srv, _ = serve(statusAccess{admin: adminTok, client: clientTok, public: true})
	resp, body = statusGet(t, srv.URL, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("public summary: %d", resp.StatusCode)
	}
	text = pageText(body)
	mustContain(t, "public summary", text, "Public summary", "idgen serving", "ready", "snowflake serving yes", "unordered serving yes", "ordered serving yes")
	mustNotContain(t, "public summary", text, append(private, "Worker slot", "Members", "pid", "cluster default", "version", "/metrics")...)
	if resp, _ := statusGet(t, srv.URL, "Bearer wrong-token-0123456789"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token with --status-public: %d, want 401 (refused, not shown the summary)", resp.StatusCode)
	}
	if _, body := statusGet(t, srv.URL, "Bearer "+adminTok); !strings.Contains(pageText(body), "Businesses (1)") {
		t.Error("the admin token with --status-public does not show the whole page")
	}

	srv, _ = serve(statusAccess{})
	_, body = statusGet(t, srv.URL, "")
	mustContain(t, "open page", pageText(body), "This page is open to anyone", "Businesses (1)", "payroll")
}

func basicAuth(user, pw string) string {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	r.SetBasicAuth(user, pw)
	return r.Header.Get("Authorization")
}

// TestStatusRenderedOncePerSecond: a flood of readers costs one render
// per view per second: 64 concurrent admin pages and 64 public ones
// render once each; the pages stay the same until the (fake) clock passes
// a second; ?refresh=N is put in without rendering again. (The code before
// this test built and rendered the page for every reader: 32 reloading
// clients took about one core.)
func TestStatusRenderedOncePerSecond(t *testing.T) {
	const adminTok = "the-admin-token-0123456789abcdef"
	nd, _, _ := startStatusNode(t, adminTok)
	nd.access = statusAccess{admin: adminTok, public: true}
	page := newStatusPage(nd, nil, zap.NewNop())
	var mu sync.Mutex
	now := time.Now()
	page.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	srv := httptest.NewServer(page)
	defer srv.Close()

	var wg sync.WaitGroup
	bodies := make([]string, 128)
	for i := range bodies {
		auth := ""
		if i%2 == 0 {
			auth = "Bearer " + adminTok
		}
		wg.Go(func() {
			resp, body := statusGet(t, srv.URL, auth)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("reader %d: %d", i, resp.StatusCode)
			}
			bodies[i] = body
		})
	}
	wg.Wait()
	if n := page.renders.Load(); n != 2 {
		t.Fatalf("128 readers of two views: %d renders, want 2", n)
	}
	for i := 2; i < len(bodies); i++ {
		if bodies[i] != bodies[i%2] {
			t.Fatalf("reader %d got another page than reader %d of the same view", i, i%2)
		}
	}
	advance(statusRenderTTL - time.Millisecond)
	_, body := statusGet(t, srv.URL+"?refresh=5", "Bearer "+adminTok)
	if n := page.renders.Load(); n != 2 {
		t.Errorf("a page within the second: %d renders, want still 2", n)
	}
	mustContain(t, "refresh from the cached page", body, `<meta http-equiv="refresh" content="5">`)
	mustNotContain(t, "refresh from the cached page", body, refreshMark)
	if _, body := statusGet(t, srv.URL, "Bearer "+adminTok); strings.Contains(body, "http-equiv") || strings.Contains(body, refreshMark) {
		t.Error("?refresh=5 changed the cached page")
	}
	advance(time.Millisecond)
	statusGet(t, srv.URL, "Bearer "+adminTok)
	if n := page.renders.Load(); n != 3 {
		t.Errorf("a page after the second: %d renders, want 3", n)
	}
}
