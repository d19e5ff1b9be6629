package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/idctlenv"
	"github.com/idgen/idgen/internal/testnode"
	"github.com/idgen/idgen/worker"
)

// TestIdctlEnvNamesListed: every IDGEN_* name in idctl's source is in
// internal/idctlenv, the list idgen takes as known, so idgen never calls a
// variable idctl reads misspelt (issue 32: IDGEN_ADDR, IDGEN_TOKEN and
// IDGEN_TLS_CA were).
func TestIdctlEnvNamesListed(t *testing.T) {
	names := regexp.MustCompile(`IDGEN_[A-Z_]*[A-Z]`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names.FindAllString(string(src), -1) {
			seen++
			if !slices.Contains(idctlenv.Names, n) {
				t.Errorf("%s names %s, which internal/idctlenv does not list: idgen would call it misspelt", f, n)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no IDGEN_* name found in idctl's source: the test reads the wrong files")
	}
}

// TestGetWithNodeClientTokenFile: exporting the node's own
// IDGEN_CLIENT_TOKEN_FILE makes idctl get work against a node started with
// --client-token-file (issue 32: it failed with UNAUTHENTICATED); the old
// spellings, --token and IDGEN_TOKEN, still work with one deprecation line
// naming the new one.
func TestGetWithNodeClientTokenFile(t *testing.T) {
	cleanEnv(t)
	file := writeToken(t, t.TempDir(), "client.token", fakeClient)
	n := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--client-token-file", file}})
	get := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, append([]string{"get", "--addr", n.RPCAddr, "--biz", "tokened", "--channel", "snowflake"}, args...)...)
	}
	if code, _, errOut := get("--timeout", "500ms"); code != 1 || !strings.Contains(errOut, "UNAUTHENTICATED") {
		t.Fatalf("without a token: exit %d, stderr %q; want UNAUTHENTICATED", code, errOut)
	}
	t.Setenv("IDGEN_CLIENT_TOKEN_FILE", file)
	if code, out, errOut := get(); code != 0 || len(strings.Fields(out)) != 1 || errOut != "" {
		t.Fatalf("with IDGEN_CLIENT_TOKEN_FILE: exit %d, stdout %q, stderr %q\nnode logs:\n%s", code, out, errOut, n.Logs())
	}
	t.Setenv("IDGEN_CLIENT_TOKEN_FILE", "")
	for _, c := range []struct {
		args    []string
		env     string // IDGEN_TOKEN
		old, to string // in the deprecation line
	}{
		{[]string{"--client-token-file", file}, "", "", ""},
		{[]string{"--client-token", fakeClient}, "", "", ""},
		{[]string{"--token", fakeClient}, "", "--token", "--client-token"},
		{nil, fakeClient, "IDGEN_TOKEN", "IDGEN_CLIENT_TOKEN"},
	} {
		t.Setenv("IDGEN_TOKEN", c.env)
		code, out, errOut := get(c.args...)
		if code != 0 || len(strings.Fields(out)) != 1 {
			t.Errorf("%v IDGEN_TOKEN=%q: exit %d, stdout %q, stderr %q", c.args, c.env, code, out, errOut)
			continue
		}
		checkDeprecation(t, errOut, c.old, c.to)
	}
}

// checkDeprecation asserts stderr is exactly one deprecation line naming
// old and its replacement to, or empty when old is "".
func checkDeprecation(t *testing.T, stderr, old, to string) {
	t.Helper()
	if old == "" {
		if stderr != "" {
			t.Errorf("stderr %q, want nothing", stderr)
		}
		return
	}
	want := "idctl: note: " + old + " is deprecated and goes in the next release: use " + to
	if lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
		t.Errorf("stderr %q, want one line starting %q", stderr, want)
	}
}

// TestDeprecatedSpellings: each old spelling still works, prints one line
// naming the new one, and --help names it only in the closing line.
func TestDeprecatedSpellings(t *testing.T) {
	cleanEnv(t)
	t.Chdir(t.TempDir())
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	admin := writeToken(t, t.TempDir(), "admin", fakeAdmin)
	for _, c := range []struct {
		args    []string
		old, to string
	}{
		{[]string{"biz", "get", "--biz", "a", "--token", fakeAdmin}, "--token", "--admin-token"},
		{[]string{"biz", "get", "--biz", "a", "--token-file", admin}, "--token-file", "--admin-token-file"},
		{[]string{"biz", "token", "list", "--biz", "tok", "--token-file", admin}, "--token-file", "--admin-token-file"},
		{[]string{"decode", "--biz", "coupon", "AA5PM8", "--token", fakeAdmin}, "--token", "--admin-token"},
		{[]string{"biz", "get", "--biz", "a", "--admin-token-file", admin}, "", ""},
	} {
		code, _, errOut := runCLI(t, append(c.args, "--addr", addr)...)
		if code != 0 {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, errOut)
			continue
		}
		checkDeprecation(t, errOut, c.old, c.to)
		method := map[string]string{"biz": "GetBiz", "decode": "Decode"}[c.args[0]]
		if got := f.lastToken(method); got != fakeAdmin {
			t.Errorf("%v: sent %q, want the admin token", c.args, got)
		}
	}
	for _, c := range []struct {
		cmd        []string
		old, shown string
	}{
		{[]string{"get"}, "token", "client-token"},
		{[]string{"bench"}, "token", "client-token"},
		{[]string{"biz", "create"}, "token-file", "admin-token-file"},
		{[]string{"workers"}, "root", "zk-root"},
		{[]string{"health"}, "addr", "admin-addr"},
	} {
		flags, out := helpFlags(t, c.cmd...)
		if slices.Contains(flags, c.old) || !slices.Contains(flags, c.shown) {
			t.Errorf("%v --help lists %v; want --%s and not --%s", c.cmd, flags, c.shown, c.old)
		}
		if !strings.Contains(out, "--"+c.old+" (now --"+c.shown+")") {
			t.Errorf("%v --help does not name the old spelling --%s:\n%s", c.cmd, c.old, out)
		}
	}
}

// TestZKAuthFileFlag: cluster init, show and workers take the nodes'
// digest credential as --zk-auth-file (issue 32: only the environment
// had it): init creates the record with a digest ACL, show and workers
// read it with the same file.
func TestZKAuthFileFlag(t *testing.T) {
	zkAddr := clusterZK(t)
	conn := dialTestZK(t, zkAddr)
	name := newClusterName(t, conn)
	auth := writeToken(t, t.TempDir(), "zk.auth", "idctl:"+name)
	// The cleanup deletes the tree with a connection that holds the
	// credential (registered after newClusterName's, so it runs first).
	t.Cleanup(func() {
		_ = conn.AddAuth("digest", []byte("idctl:"+name))
		deleteTree(conn, cluster.Path(worker.DefaultRoot, name))
	})
	out, errOut := mustRun(t, 0, "cluster", "init", "--zk", zkAddr, "--cluster", name, "--zk-auth-file", auth)
	wantIn(t, "cluster init", out, "cluster "+name+" created")
	if strings.Contains(errOut, "open to every ZooKeeper client") {
		t.Errorf("cluster init with --zk-auth-file warned of an open ACL: %q", errOut)
	}
	// A client without the credential may not read the record: it was
	// created with the digest ACL.
	if _, _, err := conn.Get(cluster.MetaPath(worker.DefaultRoot, name)); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("reading the record without the credential: %v, want %v", err, zk.ErrNoAuth)
	}
	out, _ = mustRun(t, 0, "cluster", "show", "--zk", zkAddr, "--cluster", name, "--zk-auth-file", auth)
	wantIn(t, "cluster show", out, "cluster "+name)
	mustRun(t, 0, "workers", "--zk", zkAddr, "--cluster", name, "--zk-auth-file", auth)
	// --zk-root, as cluster and bench name it (issue 32: workers took
	// --root); --root still works, with a deprecation line.
	out, errOut = mustRun(t, 0, "workers", "--zk", zkAddr, "--cluster", name, "--zk-root", worker.DefaultRoot, "--zk-auth-file", auth)
	if errOut != "" || !strings.Contains(out, "no running members") {
		t.Errorf("workers --zk-root: stdout %q, stderr %q", out, errOut)
	}
	out, errOut = mustRun(t, 0, "workers", "--zk", zkAddr, "--cluster", name, "--root", worker.DefaultRoot, "--zk-auth-file", auth)
	checkDeprecation(t, errOut, "--root", "--zk-root")
	if !strings.Contains(out, "no running members") {
		t.Errorf("workers --root: stdout %q", out)
	}
	if out, _ := mustRun(t, 1, "workers", "--zk", zkAddr, "--cluster", name, "--zk-root", "/elsewhere", "--zk-auth-file", auth); out != "" {
		t.Errorf("workers under another --zk-root printed %q", out)
	}
}
