package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idgen/idgen/internal/testnode"
)

// TestBizChannels: on a real node, --channels sets the channels a
// business serves (the first listed is the default when --channel is not
// given), biz get shows them as text and JSON, and an obfuscated business
// on overlapping channels is refused with the fix named.
func TestBizChannels(t *testing.T) {
	cleanEnv(t)
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	t.Setenv("IDGEN_ADMIN_TOKEN", n.AdminToken)
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append(args, "--addr", n.RPCAddr)...)
	}
	ok := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q\nnode logs:\n%s", args, code, out, errOut, n.Logs())
		}
		return out
	}
	out := ok("biz", "create", "--biz", "chat", "--channels", "ordered")
	if ch, chs := bizColumn(t, out, "chat", "CHANNEL"), bizColumn(t, out, "chat", "CHANNELS"); ch != "ORDERED" || chs != "ORDERED" {
		t.Fatalf("biz create --channels ordered shows channel %q channels %q:\n%s", ch, chs, out)
	}
	ok("biz", "update", "--biz", "chat", "--channels", "unordered,slow_ordered")
	if got := bizColumn(t, ok("biz", "get", "--biz", "chat"), "chat", "CHANNELS"); got != "UNORDERED,ORDERED" {
		t.Errorf("biz get shows channels %q, want UNORDERED,ORDERED", got)
	}
	var one struct {
		Channels []int `json:"channels"`
	}
	if err := json.Unmarshal([]byte(ok("biz", "get", "--biz", "chat", "--json")), &one); err != nil ||
		len(one.Channels) != 2 || one.Channels[0] != 0 || one.Channels[1] != 1 {
		t.Errorf("biz get --json: %+v, %v; want channels [0 1]", one, err)
	}
	code, _, errOut := run("biz", "create", "--biz", "coupon", "--channel", "unordered", "--channels", "unordered,ordered", "--obfuscate")
	if code == 0 || !strings.Contains(errOut, "INVALID_ARGUMENT") || !strings.Contains(errOut, "--channels") {
		t.Errorf("obfuscated business on unordered,ordered: exit %d, stderr %q; want INVALID_ARGUMENT naming --channels", code, errOut)
	}
	if code, _, errOut := run("biz", "update", "--biz", "chat", "--channels", "fast"); code == 0 || !strings.Contains(errOut, "--channels") {
		t.Errorf("--channels fast: exit %d, stderr %q; want a usage error", code, errOut)
	}
}
