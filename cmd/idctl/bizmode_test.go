package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idgen/idgen/internal/testnode"
)

// bizColumn returns the cell of column col in biz's row of the text
// output of biz get or list ("" when there is no such row).
func bizColumn(t *testing.T, out, biz, col string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	at := strings.Index(lines[0], col)
	if at < 0 {
		t.Fatalf("no %s column in:\n%s", col, out)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == biz && len(l) > at {
			return strings.Fields(l[at:])[0]
		}
	}
	return ""
}

// TestBizOrderedMode: on a real node, --ordered-mode sets the business's
// mode on create and update (not given: gapless on create, unchanged on
// update), and biz get and biz list show it, as text and as JSON.
func TestBizOrderedMode(t *testing.T) {
	cleanEnv(t)
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	t.Setenv("IDGEN_ADMIN_TOKEN", n.AdminToken)
	run := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, append(args, "--addr", n.RPCAddr)...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q\nnode logs:\n%s", args, code, out, errOut, n.Logs())
		}
		return out
	}
	out := run("biz", "create", "--biz", "fast", "--channel", "ordered", "--ordered-mode", "cached")
	if got := bizColumn(t, out, "fast", "ORDERED-MODE"); got != "cached" {
		t.Fatalf("biz create --ordered-mode cached shows %q:\n%s", got, out)
	}
	out = run("biz", "create", "--biz", "plain", "--channel", "ordered")
	if got := bizColumn(t, out, "plain", "ORDERED-MODE"); got != "gapless" {
		t.Fatalf("biz create without --ordered-mode shows %q:\n%s", got, out)
	}
	if got := bizColumn(t, run("biz", "get", "--biz", "fast"), "fast", "ORDERED-MODE"); got != "cached" {
		t.Errorf("biz get shows %q, want cached", got)
	}
	// One business asked for: one JSON object, not a one-element array
	// (issue 32).
	var one struct {
		Name        string `json:"name"`
		OrderedMode string `json:"ordered_mode"`
	}
	if err := json.Unmarshal([]byte(run("biz", "get", "--biz", "fast", "--json")), &one); err != nil || one.Name != "fast" || one.OrderedMode != "cached" {
		t.Errorf("biz get --json: %+v, %v; want one object with ordered_mode cached", one, err)
	}
	// An update of another setting keeps the mode.
	if got := bizColumn(t, run("biz", "update", "--biz", "fast", "--step", "50"), "fast", "ORDERED-MODE"); got != "cached" {
		t.Errorf("biz update --step changed the mode to %q", got)
	}
	if got := bizColumn(t, run("biz", "update", "--biz", "fast", "--ordered-mode", "gapless"), "fast", "ORDERED-MODE"); got != "gapless" {
		t.Errorf("biz update --ordered-mode gapless shows %q", got)
	}
	run("biz", "update", "--biz", "plain", "--ordered-mode", "cached")
	out = run("biz", "list")
	if a, b := bizColumn(t, out, "fast", "ORDERED-MODE"), bizColumn(t, out, "plain", "ORDERED-MODE"); a != "gapless" || b != "cached" {
		t.Errorf("biz list shows fast %q plain %q, want gapless, cached:\n%s", a, b, out)
	}
	// A business that does not serve ORDERED has no ORDERED-MODE column of
	// its own (issue 32), and "-" in a list beside ORDERED ones.
	out = run("biz", "create", "--biz", "snow", "--channel", "snowflake")
	if strings.Contains(out, "ORDERED-MODE") {
		t.Errorf("biz create of a SNOWFLAKE business shows ORDERED-MODE:\n%s", out)
	}
	if out = run("biz", "get", "--biz", "snow"); strings.Contains(out, "ORDERED-MODE") {
		t.Errorf("biz get of a SNOWFLAKE business shows ORDERED-MODE:\n%s", out)
	}
	if got := bizColumn(t, run("biz", "list"), "snow", "ORDERED-MODE"); got != "-" {
		t.Errorf("biz list shows ORDERED-MODE %q for a SNOWFLAKE business, want -", got)
	}
	var all []struct {
		Name        string `json:"name"`
		OrderedMode string `json:"ordered_mode"`
	}
	if err := json.Unmarshal([]byte(run("biz", "list", "--json")), &all); err != nil || len(all) != 3 {
		t.Fatalf("biz list --json: %+v, %v", all, err)
	}
	for _, b := range all {
		if want := map[string]string{"fast": "gapless", "plain": "cached", "snow": b.OrderedMode}[b.Name]; b.OrderedMode != want {
			t.Errorf("biz list --json: %s ordered_mode %q, want %q", b.Name, b.OrderedMode, want)
		}
	}
}

// TestBizOrderedModeSentOnlyWhenGiven: create sends ordered_mode only
// when --ordered-mode is given, as given.
func TestBizOrderedModeSentOnlyWhenGiven(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_TOKEN", fakeAdmin)
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	for _, c := range []struct {
		args []string
		want *string
	}{
		{nil, nil},
		{[]string{"--ordered-mode", "cached"}, new("cached")},
		{[]string{"--ordered-mode", "gapless"}, new("gapless")},
	} {
		args := append([]string{"biz", "create", "--addr", addr, "--biz", "m"}, c.args...)
		if code, out, errOut := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		f.mu.Lock()
		last := f.creates[len(f.creates)-1]
		f.mu.Unlock()
		if (last.OrderedMode == nil) != (c.want == nil) || c.want != nil && *last.OrderedMode != *c.want {
			t.Errorf("%v: sent ordered_mode %v, want %v", c.args, last.OrderedMode, c.want)
		}
	}
}
