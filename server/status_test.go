package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/segment"
)

// startStatusNode starts a standalone node in-process (the store, the
// worker lease and the issuer, no listeners) and returns it with a handler
// whose admin token is adminTok and an httptest server of its admin mux.
func startStatusNode(t *testing.T, adminTok string) (*node, *handler, *httptest.Server) {
	t.Helper()
	cfg, err := loadConfig([]string{"--data-dir", t.TempDir(), "--node", "7"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	clk, debug := newClock()
	m := newMetrics()
	nd := newNode(clk, cfg)
	closeAll, err := nd.start(context.Background(), cfg, clk, m, 18888, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	h := &handler{node: nd, log: zap.NewNop(), clk: clk, cluster: cfg.Cluster, adminToken: adminTok, m: m,
		auth: newAuthFailures(zap.NewNop(), m)}
	h.workers = nd.workers
	srv := httptest.NewServer(adminMux(nd, m, debug, defaultAdminLimits(), zap.NewNop()))
	t.Cleanup(srv.Close)
	return nd, h, srv
}

// getStatus fetches url and returns the answer and its body.
func getStatus(t *testing.T, method, url string) (*http.Response, string) {
	t.Helper()
	return fetchStatus(t, method, url, "")
}

// fetchStatus is getStatus with the Authorization header auth ("": none).
func fetchStatus(t *testing.T, method, url, auth string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

var tagRe = regexp.MustCompile(`<[^>]*>`)

// pageText is the page's visible text: tags dropped, entities decoded,
// white space folded, as a person (or a text browser) reads it.
func pageText(body string) string {
	body = body[strings.Index(body, "<body>"):]
	return strings.Join(strings.Fields(html.UnescapeString(tagRe.ReplaceAllString(body, " "))), " ")
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s: %q missing from:\n%s", what, w, text)
		}
	}
}

// checkStatusHeaders: the admin port's page must not run anything, be
// framed, sniffed or cached.
func checkStatusHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	for k, want := range map[string]string{
		"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Cache-Control":           "no-store",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
}

// TestStatusStarting: while the node starts, /status answers at once with
// "starting: why" for the node, every channel, the slot, the members and
// the businesses.
func TestStatusStarting(t *testing.T) {
	nd := newNode(clock.System{}, Config{Cluster: "prod-eu"})
	nd.setStarting("claiming a worker slot")
	srv := httptest.NewServer(adminMux(nd, newMetrics(), func(*http.ServeMux) {}, defaultAdminLimits(), zap.NewNop()))
	defer srv.Close()
	resp, body := getStatus(t, http.MethodGet, srv.URL+"/status")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200 while starting", resp.StatusCode)
	}
	checkStatusHeaders(t, resp)
	if ct := resp.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	text := pageText(body)
	mustContain(t, "starting page", text, "idgen starting", "not ready", "cluster prod-eu", "mode standalone", "version "+version,
		"starting: claiming a worker slot", "snowflake", "unordered", "ordered", "Worker slot", "Members", "Businesses",
		"unavailable: starting: claiming a worker slot", "no refused calls since start")
}

// TestStatusMethods: GET and HEAD only; anything else is 405 naming them,
// with the same protective headers.
func TestStatusMethods(t *testing.T) {
	nd := newNode(clock.System{}, Config{})
	nd.setStarting("opening the segment store")
	srv := httptest.NewServer(adminMux(nd, newMetrics(), func(*http.ServeMux) {}, defaultAdminLimits(), zap.NewNop()))
	defer srv.Close()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		resp, body := getStatus(t, m, srv.URL+"/status")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s /status: %d Allow %q, want 405 Allow \"GET, HEAD\"", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
		if strings.Contains(body, "<html") {
			t.Errorf("%s /status rendered the page", m)
		}
		checkStatusHeaders(t, resp)
	}
	resp, body := getStatus(t, http.MethodHead, srv.URL+"/status")
	if resp.StatusCode != http.StatusOK || body != "" {
		t.Errorf("HEAD /status: %d with %d bytes, want 200 and no body", resp.StatusCode, len(body))
	}
	checkStatusHeaders(t, resp)
	// Only the exact path: /status/x is not the page.
	if resp, _ := getStatus(t, http.MethodGet, srv.URL+"/status/x"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/status/x: %d, want 404", resp.StatusCode)
	}
}

// TestStatusServing: a started node's page shows every section from its
// source (node state and channels, the worker slot, itself as the member,
// the businesses with channel and mode, the refusals by code), escapes
// what callers and admins typed, and shows no secret.
func TestStatusServing(t *testing.T) {
	const adminTok = "the-admin-token-0123456789abcdef"
	nd, h, srv := startStatusNode(t, adminTok)
	ctx := context.Background()
	tok := adminTok
	_, err := h.CreateBiz(ctx, &idl.CreateBizRequest{Name: "order", Channel: ch(idl.Channel_ORDERED), OrderedMode: ptr("cached"),
		Description: ptr(`<script>alert("biz")</script> the order numbers`), Obfuscate: ptr(true), Token: &tok})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.CreateBiz(ctx, &idl.CreateBizRequest{Name: "im.message", Token: &tok}); err != nil {
		t.Fatal(err)
	}
	is := nd.serving.Load().is
	_, secret, err := is.CreateBizToken(ctx, "order", "checkout")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := is.GetBiz(ctx, "order")
	if err != nil || len(stored.Key) == 0 || len(stored.Tokens) != 1 {
		t.Fatalf("stored business: %v, key %d bytes, %d tokens", err, len(stored.Key), len(stored.Tokens))
	}
	// Refusals: a malformed business name (INVALID_ARGUMENT, with
	// markup in the name and the message), a wrong admin token
	// (UNAUTHENTICATED), a business token missing (UNAUTHENTICATED).
	if _, err := h.NextIDs(ctx, &idl.NextIDsRequest{Biz: "<script>alert(1)</script>", Count: 1}); err == nil {
		t.Fatal("NextIDs of a malformed name served")
	}
	wrong := "wrong-token"
	if _, err := h.GetBiz(ctx, &idl.GetBizRequest{Name: "order", Token: &wrong}); err == nil {
		t.Fatal("GetBiz with a wrong token served")
	}
	if _, err := h.NextIDs(ctx, &idl.NextIDsRequest{Biz: "order", Count: 1}); err == nil {
		t.Fatal("NextIDs of a business with tokens served without one")
	}
	if _, err := h.NextIDs(ctx, &idl.NextIDsRequest{Biz: "im.message", Count: 3}); err != nil {
		t.Fatal(err)
	}

	resp, body := getStatus(t, http.MethodGet, srv.URL+"/status")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	checkStatusHeaders(t, resp)
	text := pageText(body)
	mustContain(t, "node", text, "idgen serving", "ready", "mode standalone", "version "+version, "snowflake floor")
	mustContain(t, "channels", text, "snowflake serving yes", "unordered serving yes", "ordered serving yes")
	mustContain(t, "slot", text, "Worker slot", "worker 7 (IDC 0, node 7)", "lease registered", "high-water mark", "ahead",
		"start-up wait none", "last used")
	mustContain(t, "members", text, "Members (1)", "IDC 0 · 1 member", "7 (this node)", ":18888", "standalone")
	mustContain(t, "businesses", text, "Businesses (2)", "order ORDERED cached no int, obfuscated - 1", "im.message SNOWFLAKE gapless")
	mustContain(t, "refusals", text, "Refusals (3 since start)", "UNAUTHENTICATED 2", "INVALID_ARGUMENT 1",
		"NextIDs order UNAUTHENTICATED", "GetBiz order UNAUTHENTICATED wrong admin token",
		`NextIDs <script>alert(1)</script> INVALID_ARGUMENT`)

	// Escaping: what callers and admins typed is text, never markup.
	if strings.Contains(strings.ToLower(body), "<script") {
		t.Errorf("the page contains a <script element:\n%s", body)
	}
	mustContain(t, "escaped", body, "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;script&gt;alert(&#34;biz&#34;)&lt;/script&gt;")
	// No secret: the admin token, the business token, its hash, the key.
	for what, s := range map[string]string{"admin token": adminTok, "business token": secret,
		"token hash": hex.EncodeToString(stored.Tokens[0].Hash), "token hash (base64)": base64.StdEncoding.EncodeToString(stored.Tokens[0].Hash),
		"key": hex.EncodeToString(stored.Key), "key (base64)": base64.StdEncoding.EncodeToString(stored.Key),
		"key (base64url)": base64.RawURLEncoding.EncodeToString(stored.Key)} {
		if strings.Contains(body, s) {
			t.Errorf("the page shows the %s", what)
		}
	}
	if strings.Contains(body, stored.Tokens[0].ID) || strings.Contains(text, "checkout") {
		t.Errorf("the page lists token ids or labels; it shows only how many")
	}

	// ?refresh=N adds a meta refresh within bounds, and nothing else.
	_, body = getStatus(t, http.MethodGet, srv.URL+"/status?refresh=5")
	mustContain(t, "refresh", body, `<meta http-equiv="refresh" content="5">`)
	for _, bad := range []string{"1", "99999", "x", "5;url=http://evil"} {
		if _, body := getStatus(t, http.MethodGet, srv.URL+"/status?refresh="+bad); strings.Contains(body, "http-equiv") {
			t.Errorf("?refresh=%s added a refresh", bad)
		}
	}
}

// TestStatusMembersUnavailable: a member listing that hangs (ZooKeeper
// unreachable) or fails makes that section say "unavailable: why" within
// the page's wait; the rest of the page is there, and once a listing
// worked a failed one shows the last good listing, marked stale.
func TestStatusMembersUnavailable(t *testing.T) {
	nd, _, _ := startStatusNode(t, "tok-0123456789")
	page := newStatusPage(nd, nil, zap.NewNop())
	page.wait = 300 * time.Millisecond
	page.members.ttl = 0 // read on every page
	srv := httptest.NewServer(page)
	defer srv.Close()
	setWorkers := func(f func(context.Context, int) ([]*idl.Worker, error)) {
		s := *nd.serving.Load()
		s.workers = f
		nd.serving.Store(&s)
	}
	release := make(chan struct{})
	defer close(release)
	setWorkers(func(ctx context.Context, _ int) ([]*idl.Worker, error) {
		<-release // a listing that never answers while the test runs
		return nil, errors.New("released")
	})
	start := time.Now()
	_, body := getStatus(t, http.MethodGet, srv.URL)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("page took %v with a hanging listing, want about the wait (300ms)", d)
	}
	mustContain(t, "hanging", pageText(body), "unavailable: no answer within 300ms", "idgen serving", "no businesses")
	// A second page while the first read still hangs shares it (one read).
	_, body = getStatus(t, http.MethodGet, srv.URL)
	mustContain(t, "hanging again", pageText(body), "unavailable: no answer within 300ms")

	page2 := newStatusPage(nd, nil, zap.NewNop())
	page2.members.ttl = 0
	page2.ttl = 0 // a fresh render per page
	srv2 := httptest.NewServer(page2)
	defer srv2.Close()
	setWorkers(func(ctx context.Context, idc int) ([]*idl.Worker, error) {
		return []*idl.Worker{{Idc: 1, Node: 3, Worker: 259, Host: "10.0.0.3", Port: 8888, Pid: 42, Version: "v9",
			HeartbeatAgeMs: 12_500, ClockOffsetMs: -4, Member: "m-0000000003"}}, nil
	})
	_, body = getStatus(t, http.MethodGet, srv2.URL)
	mustContain(t, "listed", pageText(body), "IDC 1 · 1 member", "10.0.0.3:8888", "12.5s", "-4ms", "m-0000000003")
	if !strings.Contains(body, `<td class="num warn">12.5s</td>`) {
		t.Errorf("a 12.5s old heartbeat is not flagged")
	}
	setWorkers(func(context.Context, int) ([]*idl.Worker, error) {
		return nil, errors.New("zk: could not connect to a server")
	})
	_, body = getStatus(t, http.MethodGet, srv2.URL)
	mustContain(t, "failed", pageText(body), "unavailable: zk: could not connect to a server", "showing the last listing read",
		"10.0.0.3:8888")
}

// TestStatusBounded: long lists are cut with "and N more", and the page
// stays small whatever the node holds.
func TestStatusBounded(t *testing.T) {
	var bizs []segment.Biz
	for i := range 1000 {
		bizs = append(bizs, segment.Biz{Name: fmt.Sprintf("biz-%04d", i), Description: strings.Repeat("d", segment.MaxDescriptionLen),
			Key: segment.SecretKey(bytes.Repeat([]byte{0xAB}, 16)), Tokens: []segment.BizToken{{ID: "tid", Hash: []byte{0xCD, 0xEF}}}})
	}
	list := bizListOf(bizs)
	if len(list.Rows) != statusListMax || list.Total != 1000 {
		t.Fatalf("%d rows of %d, want %d of 1000", len(list.Rows), list.Total, statusListMax)
	}
	var ws []*idl.Worker
	for i := range 1024 {
		ws = append(ws, &idl.Worker{Idc: int32(i / 256), Node: int32(i % 256), Worker: int32(i), Host: "10.1.2.3", Port: 8888,
			Version: strings.Repeat("v", 64), Member: "m-0123456789"})
	}
	now := time.Now()
	r := newRefusals(refusalRingSize)
	for range 500 {
		r.add(now, "NextIDs", strings.Repeat("b", 10_000), "INVALID_ARGUMENT", strings.Repeat("m", 100_000))
	}
	v := statusView{Access: accessOf(levelAdmin), Members: membersOf(readResult[[]*idl.Worker]{val: ws, at: now}, readResult[[]*idl.Worker]{}, -1, now),
		Bizs: bizsOf(readResult[bizList]{val: list, at: now}, readResult[bizList]{}, now), Refusals: refusalsOf(r, now)}
	var buf bytes.Buffer
	if err := statusTmpl.Execute(&buf, v); err != nil {
		t.Fatal(err)
	}
	text := pageText(buf.String())
	mustContain(t, "cut lists", text, "Members (1024)", "and 824 more (idctl workers", "Businesses (1000)", "and 800 more (idctl biz list",
		"last 50 (at most 50 kept)")
	if buf.Len() > 512<<10 {
		t.Errorf("page is %d KB with full lists, want under 512 KB", buf.Len()>>10)
	}
	if strings.Contains(buf.String(), "abababab") || strings.Contains(buf.String(), "cdef") || strings.Contains(buf.String(), "tid") {
		t.Errorf("a key, token hash or token id reached the page")
	}
	t.Logf("page with full lists: %d KB", buf.Len()>>10)
}
