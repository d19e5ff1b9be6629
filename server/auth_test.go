package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/transmeta"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/internal/logevery"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// TestAuthFailuresCountAllLogFew: 100 refused tokens within a window are
// 100 in idgen_auth_failures_total and one log line (method, caller, kind);
// the next window's line carries the 99 held back.
func TestAuthFailuresCountAllLogFew(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	m := newMetrics()
	a := newAuthFailures(zap.New(core), m)
	now := time.Unix(1_700_000_000, 0)
	a.limit = logevery.New(authLogWindow, func() time.Time { return now })
	for range 100 {
		a.record(context.Background(), "CreateBiz", authAdmin, true)
		now = now.Add(50 * time.Millisecond) // 5 s in all: one window
	}
	a.record(context.Background(), "ParseID", authClient, false)
	if got := authFailureCount(t, m, "CreateBiz"); got != 100 {
		t.Errorf("counter CreateBiz = %v, want 100", got)
	}
	if got := authFailureCount(t, m, "ParseID"); got != 1 {
		t.Errorf("counter ParseID = %v, want 1", got)
	}
	if n := logs.FilterField(zap.String("method", "CreateBiz")).Len(); n != 1 {
		t.Fatalf("%d log lines for CreateBiz in one window, want 1", n)
	}
	first := logs.FilterField(zap.String("method", "CreateBiz")).All()[0].ContextMap()
	if first["kind"] != authAdmin || first["token_given"] != true || first["suppressed"] != int64(0) {
		t.Errorf("first line fields %v", first)
	}
	if _, ok := first["caller"]; !ok {
		t.Errorf("no caller field: %v", first)
	}
	if logs.FilterField(zap.String("method", "ParseID")).Len() != 1 {
		t.Error("another method's failure is logged in its own window")
	}
	now = now.Add(10 * time.Second)
	a.record(context.Background(), "CreateBiz", authAdmin, true)
	lines := logs.FilterField(zap.String("method", "CreateBiz")).All()
	if len(lines) != 2 || lines[1].ContextMap()["suppressed"] != int64(99) {
		t.Fatalf("after the window: %d lines, last %v; want 2 with suppressed 99", len(lines), lines[len(lines)-1].ContextMap())
	}
}

// TestAdminGateNeedsToken: the handler's admin gate admits the admin token
// and nothing else: no token, a wrong one, and a handler without a token
// (which Run never builds) all answer UNAUTHENTICATED naming where the
// token is, and each refusal is counted.
func TestAdminGateNeedsToken(t *testing.T) {
	m := newMetrics()
	h := &handler{log: zap.NewNop(), m: m, adminToken: "the-admin-token-0123456789", auth: newAuthFailures(zap.NewNop(), m)}
	if err := h.admin(context.Background(), str("the-admin-token-0123456789")); err != nil {
		t.Fatalf("the admin token refused: %v", err)
	}
	for _, tok := range []*string{nil, str(""), str("the-admin-token-012345678"), str("the-admin-token-0123456789x")} {
		wantCode(t, h.admin(context.Background(), tok), idl.ErrorCode_UNAUTHENTICATED, "--admin-token-file", "admin.token")
	}
	if got := authFailureCount(t, m, "unknown"); got != 4 {
		t.Errorf("counted %v refusals, want 4", got)
	}
	none := &handler{log: zap.NewNop(), m: m}
	wantCode(t, none.admin(context.Background(), str("")), idl.ErrorCode_UNAUTHENTICATED)
	wantCode(t, none.admin(context.Background(), nil), idl.ErrorCode_UNAUTHENTICATED)
}

// TestClientTokenOnParseClockListWorkers: with a client token on the node,
// ParseID, Clock and ListWorkers refuse a call without it (or with a wrong
// one) and take the client token or the admin token; without a client
// token they stay open.
func TestClientTokenOnParseClockListWorkers(t *testing.T) {
	m := newMetrics()
	h := &handler{log: zap.NewNop(), m: m, node: newNode(clock.System{}, Config{}), clk: clock.System{},
		adminToken: "the-admin-token-0123456789", clientToken: "the-client-token-0123456789", auth: newAuthFailures(zap.NewNop(), m)}
	calls := map[string]func(tok *string) error{
		"ParseID": func(tok *string) error {
			_, err := h.ParseID(context.Background(), &idl.ParseIDRequest{Id: 1, Token: tok})
			return err
		},
		"Clock": func(tok *string) error {
			_, err := h.Clock(context.Background(), &idl.ClockRequest{Token: tok})
			return err
		},
		"ListWorkers": func(tok *string) error {
			_, err := h.ListWorkers(context.Background(), &idl.ListWorkersRequest{Token: tok})
			return err
		},
	}
	for name, call := range calls {
		for _, tok := range []*string{nil, str("wrong-token-0123456789")} {
			wantCode(t, call(tok), idl.ErrorCode_UNAUTHENTICATED, name, "client token")
		}
		for _, tok := range []*string{str("the-client-token-0123456789"), str("the-admin-token-0123456789")} {
			if err := call(tok); isCode(err, idl.ErrorCode_UNAUTHENTICATED) {
				t.Errorf("%s with a valid token: %v", name, err)
			}
		}
		if got := authFailureCount(t, m, name); got != 2 {
			t.Errorf("%s: counted %v refusals, want 2", name, got)
		}
	}
	if _, err := h.Clock(context.Background(), nil); !isCode(err, idl.ErrorCode_UNAUTHENTICATED) {
		t.Errorf("Clock with a nil request: %v", err)
	}
	h.clientToken = ""
	for name, call := range calls {
		if err := call(nil); isCode(err, idl.ErrorCode_UNAUTHENTICATED) {
			t.Errorf("%s without a client token on the node: %v", name, err)
		}
	}
}

func isCode(err error, code idl.ErrorCode) bool {
	var ie *idl.IdgenError
	return errors.As(err, &ie) && ie.Code == code
}

func wantCode(t *testing.T, err error, code idl.ErrorCode, inMessage ...string) {
	t.Helper()
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || ie.Code != code {
		t.Errorf("err = %v, want %v", err, code)
		return
	}
	for _, w := range inMessage {
		if !strings.Contains(ie.Message, w) {
			t.Errorf("message %q lacks %q", ie.Message, w)
		}
	}
}

// ripHandler is a client meta handler that writes the TTHeader string key
// "rip": Kitex servers take it as the caller's address.
type ripHandler struct{ addr string }

func (r ripHandler) WriteMeta(ctx context.Context, msg remote.Message) (context.Context, error) {
	msg.TransInfo().PutTransStrInfo(map[string]string{transmeta.HeaderTransRemoteAddr: r.addr})
	return ctx, nil
}

func (ripHandler) ReadMeta(ctx context.Context, _ remote.Message) (context.Context, error) {
	return ctx, nil
}

// TestE2E_AdminNeedsTokenEvenFromLoopback: on a real node with default
// settings, an admin RPC from loopback without the token is refused
// UNAUTHENTICATED, whether or not the TTHeader claims a loopback address
// (rip=127.0.0.1:1; on the old code loopback alone was enough); with the
// node's token every admin RPC works. The refusals are counted in
// idgen_auth_failures_total.
func TestE2E_AdminNeedsTokenEvenFromLoopback(t *testing.T) {
	n := testnode.Start(t, testnode.Options{DataDir: filepath.Join(t.TempDir(), "data"), NodeAdminToken: true})
	ctx := context.Background()
	clients := map[string]idgensvc.Client{
		"loopback":           n.BareClient(t),
		"rip=127.0.0.1:1":    n.BareClient(t, client.WithMetaHandler(ripHandler{"127.0.0.1:1"})),
		"rip=198.51.100.7:1": n.BareClient(t, client.WithMetaHandler(ripHandler{"198.51.100.7:1"})),
	}
	for name, c := range clients {
		_, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "spoofed"})
		wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED, "admin.token")
		_, err = c.ListBiz(ctx, &idl.ListBizRequest{})
		wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED)
		_, err = c.Decode(ctx, &idl.DecodeRequest{Biz: "x", Value: "1"})
		wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED)
		_, err = c.GetBiz(ctx, &idl.GetBizRequest{Name: "spoofed", Token: str("a-wrong-token-0123456789")})
		wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED, "wrong admin token")
		if t.Failed() {
			t.Fatalf("client %s: admitted without the token", name)
		}
	}
	tok := n.AdminToken
	c := clients["rip=127.0.0.1:1"]
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "ok", Token: &tok}); err != nil {
		t.Fatalf("CreateBiz with the token: %v", err)
	}
	if b, err := c.GetBiz(ctx, &idl.GetBizRequest{Name: "ok", Token: &tok}); err != nil || b.Name != "ok" {
		t.Fatalf("GetBiz with the token: %v, %v", b, err)
	}
	if l, err := c.ListBiz(ctx, &idl.ListBizRequest{Token: &tok}); err != nil || len(l.Bizs) == 0 {
		t.Fatalf("ListBiz with the token: %v, %v", l, err)
	}
	if _, err := n.Client(t).UpdateBiz(ctx, &idl.UpdateBizRequest{Name: "ok", Description: str("via testnode's token middleware")}); err != nil {
		t.Fatalf("UpdateBiz through Node.Client: %v", err)
	}
	_, body, err := n.Get(ctx, "/metrics")
	if err != nil || !strings.Contains(body, `idgen_auth_failures_total{method="CreateBiz"} 3`) {
		t.Errorf("metrics lack 3 CreateBiz auth failures (%v):\n%s", err, grepLines(body, "idgen_auth_failures"))
	}
	logs := n.Logs()
	if !strings.Contains(logs, "refused an RPC") || strings.Contains(logs, tok) {
		t.Errorf("want a refusal logged and never the token; logs:\n%s", logs)
	}
}

// TestE2E_GeneratedAdminTokenFile: a node started with no admin token
// writes <data_dir>/admin.token with mode 0600, names the file (never the
// token) in its log, and uses the same file after a restart.
func TestE2E_GeneratedAdminTokenFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	n := testnode.Start(t, testnode.Options{DataDir: dir, NodeAdminToken: true})
	path := filepath.Join(dir, "admin.token")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no %s: %v", path, err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %04o, want 0600", path, st.Mode().Perm())
	}
	tok := n.AdminToken
	if len(tok) < 43 || !strings.Contains(n.Logs(), path) || strings.Contains(n.Logs(), tok) {
		t.Fatalf("token %d chars; want the file named in the log and the token never:\n%s", len(tok), n.Logs())
	}
	n.Kill()
	n.Restart(t)
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != tok {
		t.Fatalf("the token changed across a restart")
	}
	if _, err := n.BareClient(t).CreateBiz(context.Background(), &idl.CreateBizRequest{Name: "after", Token: &tok}); err != nil {
		t.Fatalf("CreateBiz with the first start's token after a restart: %v", err)
	}
}

// TestE2E_ClientTokenCluster: a two-node ZooKeeper cluster whose nodes
// share a client token starts, and the second node's peer clock check is
// answered by the first (nodes send their client token on Clock); ParseID,
// Clock and ListWorkers refuse a caller without the token and answer one
// with the client token or the admin token.
func TestE2E_ClientTokenCluster(t *testing.T) {
	zk := os.Getenv("IDGEN_TEST_ZK")
	if zk == "" {
		t.Skip("IDGEN_TEST_ZK not set: run ./build.sh test (it starts ZooKeeper)")
	}
	cluster := fmt.Sprintf("auth%d", rand.Uint32())
	clientTok := testnode.NewToken()
	tokFile := testnode.WriteTokenFile(t, t.TempDir(), "client.token", clientTok)
	// One ZooKeeper server and no MySQL: accepted explicitly (Validate).
	args := []string{"--zk", zk, "--zk-single-server-unwitnessed", "--cluster", cluster, "--zk-session-timeout", "3s", "--heartbeat-interval", "500ms",
		"--advertise-host", "127.0.0.1", "--client-token-file", tokFile}
	var nodes []*testnode.Node
	for range 2 {
		n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: append(args, "--properties-dir", t.TempDir())})
		n.WaitSnowflake(t, 30*time.Second)
		nodes = append(nodes, n)
	}
	if logs := nodes[1].Logs(); !strings.Contains(logs, "peer clock check passed") {
		t.Fatalf("the second node's peer clock check did not pass (no peer answered with the token?):\n%s", logs)
	}
	ctx := context.Background()
	bare := nodes[0].BareClient(t)
	_, err := bare.Clock(ctx, &idl.ClockRequest{})
	wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED, "client token")
	_, err = bare.ListWorkers(ctx, &idl.ListWorkersRequest{})
	wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED)
	_, err = bare.ParseID(ctx, &idl.ParseIDRequest{Id: 1 << 40})
	wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED)
	_, err = bare.Clock(ctx, &idl.ClockRequest{Token: str("wrong-token-0123456789")})
	wantCode(t, err, idl.ErrorCode_UNAUTHENTICATED)
	for _, tok := range []string{clientTok, nodes[0].AdminToken} {
		if r, err := bare.Clock(ctx, &idl.ClockRequest{Token: &tok}); err != nil || r.Cluster != cluster {
			t.Errorf("Clock with a valid token: %+v, %v", r, err)
		}
		if r, err := bare.ListWorkers(ctx, &idl.ListWorkersRequest{Token: &tok}); err != nil || len(r.Workers) != 2 {
			t.Errorf("ListWorkers with a valid token: %+v, %v", r, err)
		}
		if _, err := bare.ParseID(ctx, &idl.ParseIDRequest{Id: 1 << 40, Token: &tok}); err != nil {
			t.Errorf("ParseID with a valid token: %v", err)
		}
	}
}

// authFailureCount reads idgen_auth_failures_total{method} from m's
// registry (0 when absent).
func authFailureCount(t *testing.T, m *metrics, method string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idgen_auth_failures_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == method {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
