package main

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// NextIDs answers one ID and records the channel asked for.
func (f *fakeNode) NextIDs(_ context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
	f.mu.Lock()
	f.channels = append(f.channels, req.GetChannel())
	f.mu.Unlock()
	return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: 42, Last: 42}}, Channel: req.GetChannel(), Count: 1}, nil
}

// TestGetChannelByNameOrNumber: --channel takes every name (slow_ordered
// too) and a number, so a custom strategy's channel (examples/dateorder's
// 16) can be asked for (issue 32); get --help lists them.
func TestGetChannelByNameOrNumber(t *testing.T) {
	cleanEnv(t)
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	for _, c := range []struct {
		arg  string
		want idl.Channel
	}{
		{"snowflake", idl.Channel_SNOWFLAKE}, {"unordered", idl.Channel_UNORDERED}, {"ordered", idl.Channel_ORDERED},
		{"slow_ordered", idl.Channel_SLOW_ORDERED}, {"slow-ordered", idl.Channel_SLOW_ORDERED}, {"2", idl.Channel_SNOWFLAKE}, {"16", 16},
	} {
		code, out, errOut := runCLI(t, "get", "--addr", addr, "--biz", "b", "--channel", c.arg)
		f.mu.Lock()
		got := f.channels[len(f.channels)-1]
		f.mu.Unlock()
		if code != 0 || out != "42\n" || got != c.want {
			t.Errorf("--channel %s: exit %d, stdout %q, stderr %q, sent channel %d; want %d", c.arg, code, out, errOut, got, c.want)
		}
	}
	if code, _, errOut := runCLI(t, "get", "--addr", addr, "--biz", "b", "--channel", "128"); code != 2 || !strings.Contains(errOut, "0-127") {
		t.Errorf("--channel 128: exit %d, stderr %q; want a usage error", code, errOut)
	}
	for _, cmd := range [][]string{{"get"}, {"bench"}, {"biz", "create"}} {
		_, out := helpFlags(t, cmd...)
		for _, w := range []string{"slow_ordered", "0-127"} {
			if !strings.Contains(out, w) {
				t.Errorf("%v --help does not name %s:\n%s", cmd, w, out)
			}
		}
	}
}

// TestSynopsisShowsDefaultedFlagsOptional: a flag with a default (--addr
// is 127.0.0.1:8888 or IDGEN_ADDR) is shown in brackets in the usage line,
// not as required (issue 32).
func TestSynopsisShowsDefaultedFlagsOptional(t *testing.T) {
	cleanEnv(t)
	defaulted := regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)[^\n]*\n[^\n]*\(default `)
	for _, cmd := range [][]string{{"get"}, {"parse"}, {"decode"}, {"bench"}, {"health"}, {"workers"}, {"audit"},
		{"biz", "create"}, {"biz", "update"}, {"biz", "get"}, {"biz", "list"}, {"biz", "token", "create"}, {"biz", "token", "revoke"},
		{"biz", "token", "list"}, {"db", "migrate"}, {"db", "check"}, {"cluster", "init"}, {"cluster", "show"}, {"cluster", "migrate"}} {
		_, out := helpFlags(t, cmd...)
		synopsis, _, _ := strings.Cut(out, "\n")
		for _, m := range defaulted.FindAllStringSubmatch(out, -1) {
			name := "--" + m[1]
			for at := strings.Index(synopsis, name+" "); at >= 0; {
				if depth := strings.Count(synopsis[:at], "[") - strings.Count(synopsis[:at], "]"); depth <= 0 {
					t.Errorf("%v: usage line shows %s, which has a default, as required: %s", cmd, name, synopsis)
				}
				next := strings.Index(synopsis[at+1:], name+" ")
				if next < 0 {
					break
				}
				at += 1 + next
			}
		}
	}
}

// TestSubcommandHelpIsItsOwn: cluster init --help shows init's text, not
// the whole group's; db check --help does not carry migrate's timeout
// text (issue 32).
func TestSubcommandHelpIsItsOwn(t *testing.T) {
	cleanEnv(t)
	for _, c := range []struct {
		cmd       []string
		want, not []string
	}{
		{[]string{"cluster", "init"}, []string{"usage: idctl cluster init", "created once", "digest ACL"}, []string{"restore is the operator's fix", "migrate moves", "idctl cluster show"}},
		{[]string{"cluster", "restore"}, []string{"restore is the operator's fix"}, []string{"created once", "migrate moves"}},
		{[]string{"cluster", "migrate"}, []string{"migrate moves", "-mysql-file"}, []string{"created once", "restore is the operator's fix"}},
		{[]string{"db", "check"}, []string{"usage: idctl db check", "crash-safe", "-strict-replication"}, []string{"migrate waits", "another node's"}},
		{[]string{"db", "migrate"}, []string{"usage: idctl db migrate", "another node's or idctl's migration"}, []string{"crash-safe", "-strict-replication"}},
		{[]string{"db", "unbind"}, []string{"stopped for good"}, []string{"another node's", "crash-safe"}},
	} {
		_, out := helpFlags(t, c.cmd...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v --help lacks %q:\n%s", c.cmd, w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(out, n) {
				t.Errorf("%v --help carries another subcommand's text %q:\n%s", c.cmd, n, out)
			}
		}
	}
	// The group's help still has every subcommand.
	_, out, _ := runCLI(t, "cluster", "--help")
	for _, w := range []string{"idctl cluster init", "idctl cluster restore", "restore is the operator's fix", "migrate moves"} {
		if !strings.Contains(out, w) {
			t.Errorf("cluster --help lacks %q", w)
		}
	}
}

// TestRefusedDial: a refused connection is one line naming the address,
// for every command that calls a node (issue 32: "connection has been
// closed by peer" after 57 tries): after one dial, or for get after its
// --timeout of dials (see TestGetWaitsForARestartingNode).
func TestRefusedDial(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_TOKEN", fakeAdmin)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	want := "idctl: connection refused: is idgen running on " + closed + "?"
	for _, args := range [][]string{
		{"get", "--biz", "b", "--timeout", "300ms"},
		{"biz", "get", "--biz", "b", "--timeout", "1m"},
		{"biz", "token", "list", "--biz", "b"},
		{"decode", "--biz", "b", "V"},
		{"parse", "5000"},
		{"bench", "--biz", "b", "--requests", "1", "--quiet"},
	} {
		code, out, errOut := runCLI(t, append(args, "--addr", closed)...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want one line %q", args, code, out, errOut, want)
		}
	}
	// bench with several nodes: refused only when every one refuses.
	live := startFakeNode(t, &fakeNode{})
	code, _, errOut := runCLI(t, "bench", "--biz", "b", "--requests", "1", "--quiet", "--addr", closed+","+closed)
	if code != 1 || !strings.HasPrefix(errOut, "idctl: connection refused by every node of --addr "+closed+","+closed) {
		t.Errorf("bench on two refusing nodes: exit %d, stderr %q", code, errOut)
	}
	if code, out, errOut := runCLI(t, "bench", "--biz", "b", "--requests", "1", "--quiet", "--json", "--addr", closed+","+live); strings.Contains(errOut, "connection refused by every node") {
		t.Errorf("bench with one live node of two was refused: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestGetWaitsForARestartingNode: get waits within --timeout for a node
// that starts listening late, as one restarted a moment ago (issue 10's
// contract, which the one-line refusal keeps).
func TestGetWaitsForARestartingNode(t *testing.T) {
	cleanEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	quietKitexBoth(addr)
	listening := make(chan struct{})
	go func() {
		// Listen once get has been refused at least once.
		time.Sleep(3 * dialRetryPause)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			close(listening)
			return
		}
		startFakeNodeOn(t, &fakeNode{}, ln)
		close(listening)
	}()
	code, out, errOut := runCLI(t, "get", "--addr", addr, "--biz", "b", "--timeout", "1m")
	<-listening
	if code != 0 || out != "42\n" {
		t.Fatalf("get of a node listening late: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestHealthOnRPCPort: health given a node's RPC port says so instead of a
// bare EOF (issue 32), and the old --addr spelling still works.
func TestHealthOnRPCPort(t *testing.T) {
	cleanEnv(t)
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir()})
	code, out, errOut := runCLI(t, "health", "--admin-addr", n.RPCAddr)
	if code != 1 || out != "" || !strings.Contains(errOut, n.RPCAddr+" is a node's RPC port") || !strings.Contains(errOut, "--admin-addr") {
		t.Errorf("health on the RPC port: exit %d, stdout %q, stderr %q; want it named as the RPC port", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "health", "--admin-addr", n.AdminAddr)
	if code != 0 || !strings.Contains(out, "healthy") || errOut != "" {
		t.Errorf("health on the admin port: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "health", "--addr", n.AdminAddr)
	if code != 0 || !strings.Contains(out, "healthy") {
		t.Errorf("health --addr (old spelling): exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	checkDeprecation(t, errOut, "--addr", "--admin-addr")
}
