package server

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idgen/idgen/internal/testnode"
)

// TestLineLimiter: per prefix, the first 5 lines of a window pass, the rest
// are dropped and summed up in one line when the window ends; another
// prefix has its own budget; a new window starts afresh.
func TestLineLimiter(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	var (
		mu    sync.Mutex
		fires []func()
	)
	after := func(_ time.Duration, f func()) *time.Timer {
		mu.Lock()
		defer mu.Unlock()
		fires = append(fires, f)
		return nil
	}
	r := newLineLimiter(5, 10*time.Second, zap.New(core), after)
	passed := 0
	for i := range 100 {
		if r.allow("KITEX: processing request error, remoteAddr=127.0.0.1:" + string(rune('0'+i%10)) + ", error=junk") {
			passed++
		}
	}
	if passed != 5 {
		t.Fatalf("%d of 100 lines with one prefix passed, want 5", passed)
	}
	if !r.allow("KITEX: OnActive error=x") {
		t.Fatal("another prefix shares the budget")
	}
	if logs.Len() != 0 {
		t.Fatalf("summary before the window ended: %v", logs.All())
	}
	mu.Lock()
	fs := fires
	fires = nil
	mu.Unlock()
	for _, f := range fs {
		f()
	}
	sum := logs.FilterMessage("Kitex log lines dropped by the rate limit").All()
	if len(sum) != 1 {
		t.Fatalf("summary lines %v, want one (only the first prefix dropped lines)", logs.All())
	}
	if f := sum[0].ContextMap(); f["prefix"] != "KITEX: processing request error" || f["dropped"] != int64(95) {
		t.Errorf("summary fields %v", f)
	}
	if !r.allow("KITEX: processing request error, again") {
		t.Error("a new window did not start afresh")
	}
}

// TestE2E_GarbageFramesLogFew: 100 connections sending garbage make a
// handful of log lines, not one or more each, and the number dropped is
// reported once the window ends.
func TestE2E_GarbageFramesLogFew(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	before := strings.Count(node.Logs(), "\n")
	for range 100 {
		c, err := net.DialTimeout("tcp", node.RPCAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A framed length, then bytes that are no Thrift message.
		_, _ = c.Write([]byte("\x00\x00\x00\x20" + strings.Repeat("\xfe\xed", 16)))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Read(make([]byte, 64))
		c.Close()
	}
	var logs string
	testnode.WaitFor(t, 30*time.Second, "the rate limit's summary line", func() bool {
		logs = node.Logs()
		return strings.Contains(logs, "Kitex log lines dropped by the rate limit")
	})
	lines := strings.Split(logs, "\n")[before:]
	kitex := 0
	for _, l := range lines {
		if strings.Contains(l, "KITEX") {
			kitex++
		}
	}
	if kitex == 0 || kitex > 2*kitexBurst {
		t.Errorf("%d Kitex lines for 100 garbage connections, want between 1 and %d:\n%s", kitex, 2*kitexBurst, strings.Join(lines, "\n"))
	}
	t.Logf("%d log lines for 100 garbage frames", len(lines))
}

// TestNetpollLinesToZap: a line written to the writer netpoll is given, in
// the format of netpoll's logger (log.LstdFlags, "NETPOLL: " prefix), comes
// out as one warn entry of the "netpoll" logger with both prefixes
// stripped; a message spanning lines makes one entry per line; repeated
// lines are rate-limited like Kitex's.
func TestNetpollLinesToZap(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	setNetpollLogger(zap.New(core).Named("netpoll"))
	t.Cleanup(func() { netpollOut.cur.Store(nil) }) // back to stderr for the rest of the tests
	// netpoll's logger: log.New(w, "", log.LstdFlags), Printf per line.
	np := log.New(netpollOut, "", log.LstdFlags)

	np.Printf("NETPOLL: accept conn failed: %v", "accept4: too many open files")
	all := logs.TakeAll()
	if len(all) != 1 {
		t.Fatalf("entries %v, want one", all)
	}
	e := all[0]
	if e.Message != "accept conn failed: accept4: too many open files" || e.Level != zapcore.WarnLevel || e.LoggerName != "netpoll" {
		t.Errorf("entry %q level %v logger %q; want the message without prefixes, warn, netpoll", e.Message, e.Level, e.LoggerName)
	}

	np.Printf("NETPOLL: poller close failed: %v\n", "first\nsecond")
	var msgs []string
	for _, e := range logs.TakeAll() {
		msgs = append(msgs, e.Message)
	}
	if fmt.Sprint(msgs) != "[poller close failed: first second]" {
		t.Errorf("a two-line message logged as %q, want one entry per line", msgs)
	}

	for i := range 3 * kitexBurst {
		np.Printf("NETPOLL: readall(fd=%d)=0 before close: connection reset", i)
	}
	if n := logs.Len(); n != kitexBurst {
		t.Errorf("%d entries for %d repeated lines, want the burst of %d", n, 3*kitexBurst, kitexBurst)
	}
}

// TestNetpollMessage: what is stripped from a line and what is kept.
func TestNetpollMessage(t *testing.T) {
	for in, want := range map[string]string{
		"2026/11/24 06:30:00 NETPOLL: netFD close failed: bad fd": "netFD close failed: bad fd",
		"NETPOLL: re-accept conn success: 127.0.0.1:1":            "re-accept conn success: 127.0.0.1:1",
		"2026/11/24 06:30:00 something else":                      "something else",
		"continuation of a message":                               "continuation of a message",
		"2026/11/24 06:30:00 ":                                    "",
		"":                                                        "",
	} {
		if got := netpollMessage(in); got != want {
			t.Errorf("netpollMessage(%q) = %q, want %q", in, got, want)
		}
	}
}
