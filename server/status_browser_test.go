package server

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// chromiumTimeout bounds one headless Chromium run. A run takes about 3 s
// on an idle 2-core machine; CI is a busy one, so the bound is generous.
const chromiumTimeout = 120 * time.Second

// TestStatusBrowser renders /status of a real node in headless Chromium
// and checks what a person sees: the node state, each channel, the
// members, the businesses and the refusal codes. With IDGEN_TEST_ZK and
// IDGEN_TEST_MYSQL it runs a two-node cluster (one node per IDC) so the
// members come from ZooKeeper and the businesses from MySQL; without them,
// one standalone node.
//
// IDGEN_STATUS_SCREENSHOT=FILE also writes a 1200x900 screenshot of the
// page there (how docs/status.png is made).
func TestStatusBrowser(t *testing.T) {
	chromium := os.Getenv("IDGEN_TEST_CHROMIUM")
	if chromium == "" {
		t.Skip("IDGEN_TEST_CHROMIUM not set: ./build.sh test installs Chromium and sets it")
	}
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	cluster := zkAddr != "" && base != ""
	var nodes []*testnode.Node
	if cluster {
		dsn := testdb.New(t, base)
		name := fmt.Sprintf("status%d", rand.Uint32())
		for idc := range 2 {
			n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{
				"--zk", zkAddr, "--cluster", name, "--mysql", dsn, "--idc", fmt.Sprint(idc), "--zk-session-timeout", "4s",
				"--heartbeat-interval", "1s", "--advertise-host", "127.0.0.1", "--properties-dir", t.TempDir()}})
			nodes = append(nodes, n)
		}
	} else {
		t.Log("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: one standalone node")
		nodes = append(nodes, testnode.Start(t, testnode.Options{DataDir: t.TempDir()}))
	}
	for _, n := range nodes {
		n.WaitSnowflake(t, 30*time.Second)
	}
	n := nodes[0]
	c, bare := n.Client(t), n.BareClient(t)
	ctx := context.Background()

	for _, b := range []*idl.CreateBizRequest{
		{Name: "order", Channel: ch(idl.Channel_UNORDERED), Step: ptr(int64(5000)), Description: ptr("checkout order numbers")},
		{Name: "im.message", Fallback: ptr(true), Description: ptr("chat message IDs, time-ordered")},
		{Name: "chat.seq", Channel: ch(idl.Channel_ORDERED), OrderedMode: ptr("cached"), Description: ptr("per-room sequence")},
		{Name: "invoice", Channel: ch(idl.Channel_ORDERED), RateLimit: ptr(int32(1)), Description: ptr(`<script>alert("x")</script> legal numbering`)},
	} {
		if _, err := c.CreateBiz(ctx, b); err != nil {
			t.Fatalf("CreateBiz %s: %v", b.Name, err)
		}
	}
	if _, err := c.CreateBizToken(ctx, &idl.CreateBizTokenRequest{Biz: "invoice", Label: ptr("billing")}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*idl.NextIDsRequest{
		{Biz: "order", Count: 10}, {Biz: "im.message", Count: 3}, {Biz: "chat.seq", SubKey: str("room-42"), Count: 2},
	} {
		if _, err := c.NextIDs(ctx, r); err != nil {
			t.Fatalf("NextIDs %s: %v", r.Biz, err)
		}
	}
	// Refused calls, each with its code.
	refuse := func(what string, err error, want idl.ErrorCode) {
		t.Helper()
		_ = mustCode(t, what, err, want)
	}
	_, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "<script>bad name", Count: 1})
	refuse("malformed name", err, idl.ErrorCode_INVALID_ARGUMENT)
	_, err = c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "order", Count: 20000})
	refuse("count above max_batch", err, idl.ErrorCode_INVALID_ARGUMENT)
	_, err = bare.GetBiz(ctx, &idl.GetBizRequest{Name: "order"})
	refuse("admin RPC without the token", err, idl.ErrorCode_UNAUTHENTICATED)
	_, err = c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "invoice", Count: 1})
	refuse("business token missing", err, idl.ErrorCode_UNAUTHENTICATED)
	if cluster {
		_, err = c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "refund", Count: 1})
		refuse("unknown business", err, idl.ErrorCode_UNKNOWN_BIZ)
	}

	// /status needs the admin token: given as the password in the URL,
	// which the browser answers the page's basic challenge with.
	url := "http://status:" + n.AdminToken + "@" + n.AdminAddr + "/status"
	dom, took := runChromium(t, chromium, "--dump-dom", url)
	t.Logf("chromium --dump-dom took %v", took)
	text := pageText(dom)
	mustContain(t, "rendered page", text, "idgen serving", "ready", "snowflake serving yes", "unordered serving yes",
		"ordered serving yes", "(this node)", "order UNORDERED", "im.message SNOWFLAKE", "chat.seq ORDERED cached",
		`<script>alert("x")</script> legal numbering`, "INVALID_ARGUMENT 2", "UNAUTHENTICATED 2",
		"NextIDs <script>bad name INVALID_ARGUMENT")
	if cluster {
		mustContain(t, "rendered cluster page", text, "mode zk+mysql", "Members (2)", "IDC 0 · 1 member", "IDC 1 · 1 member",
			"UNKNOWN_BIZ 1", "registry ZooKeeper connected")
	}
	if strings.Contains(strings.ToLower(dom), "<script") {
		t.Errorf("the rendered DOM has a <script element:\n%s", dom)
	}

	if shot := os.Getenv("IDGEN_STATUS_SCREENSHOT"); shot != "" {
		_, took := runChromium(t, chromium, "--screenshot="+shot, "--window-size=1200,900", "--hide-scrollbars", url)
		t.Logf("screenshot written to %s in %v", shot, took)
	}
}

// runChromium runs headless Chromium with args after the common flags
// (root in CI, hence --no-sandbox; nothing fetched but the page) and
// returns its stdout and how long it took. The process group is killed
// when the run times out, so no renderer outlives the test.
func runChromium(t *testing.T, bin string, args ...string) (string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chromiumTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		tail := stderr.String()
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		t.Fatalf("%s %s: %v after %v (timeout %v)\nstderr (end):\n%s", bin, strings.Join(args, " "), err, took, chromiumTimeout, tail)
	}
	return stdout.String(), took
}
