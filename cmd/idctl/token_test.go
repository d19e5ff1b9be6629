package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

const (
	fakeAdmin  = "fake-admin-token-0123456789"
	fakeClient = "fake-client-token-0123456789"
)

func (f *fakeNode) UpdateBiz(_ context.Context, req *idl.UpdateBizRequest) (*idl.Biz, error) {
	f.sawToken("UpdateBiz", req.Token)
	return &idl.Biz{Name: req.Name, IdQuota: req.IdQuota, IdBurst: req.IdBurst}, nil
}

func (f *fakeNode) GetBiz(_ context.Context, req *idl.GetBizRequest) (*idl.Biz, error) {
	f.sawToken("GetBiz", req.Token)
	b := &idl.Biz{Name: req.Name, Channel: idl.Channel_UNORDERED, IdQuota: new(int64(1000)), IdBurst: new(int64(50))}
	if req.Name == "tok" {
		b.Tokens = []*idl.BizToken{{Id: "t1", Label: "billing", CreatedAtMs: 1_700_000_000_000}, {Id: "t2", Label: "ops", CreatedAtMs: 1_700_000_001_000}}
	}
	return b, nil
}

// ListBiz serves b0..b4 two per page.
func (f *fakeNode) ListBiz(_ context.Context, req *idl.ListBizRequest) (*idl.ListBizResponse, error) {
	f.sawToken("ListBiz", req.Token)
	f.mu.Lock()
	f.afters = append(f.afters, req.GetAfter())
	f.mu.Unlock()
	names := []string{"b0", "b1", "b2", "b3", "b4"}
	var page []*idl.Biz
	for _, n := range names {
		if n > req.GetAfter() && len(page) < 2 {
			page = append(page, &idl.Biz{Name: n})
		}
	}
	resp := &idl.ListBizResponse{Bizs: page}
	if len(page) == 2 && page[1].Name != names[len(names)-1] {
		resp.Next = &page[1].Name
	}
	return resp, nil
}

func (f *fakeNode) CreateBizToken(_ context.Context, req *idl.CreateBizTokenRequest) (*idl.CreateBizTokenResponse, error) {
	f.sawToken("CreateBizToken", req.Token)
	return &idl.CreateBizTokenResponse{Info: &idl.BizToken{Id: "t3", Label: req.GetLabel(), CreatedAtMs: 1_700_000_000_000},
		Secret: "s3cr3t-shown-once-0123456789"}, nil
}

func (f *fakeNode) RevokeBizToken(_ context.Context, req *idl.RevokeBizTokenRequest) (*idl.RevokeBizTokenResponse, error) {
	f.sawToken("RevokeBizToken", req.Token)
	if req.Id != "t1" {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT, Message: "no token " + req.Id}
	}
	return &idl.RevokeBizTokenResponse{Remaining: 0}, nil
}

// writeToken writes token into dir/name (mode 0600) and returns the path.
func writeToken(t *testing.T, dir, name, token string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// resolveAdmin parses args as an admin command's flags and resolves the
// admin token, as biz and decode do.
func resolveAdmin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	fs := newCmdFlags("biz get", "idctl biz get", "", io.Discard)
	tokens := addAdminTokenFlags(fs)
	if err := fs.parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return tokens.resolve()
}

// TestResolveAdminToken: --admin-token(-file), then IDGEN_ADMIN_TOKEN(_FILE),
// then $IDGEN_DATA_DIR/admin.token, then ./data/admin.token; none found is
// an error naming every way.
func TestResolveAdminToken(t *testing.T) {
	cleanEnv(t)
	work := t.TempDir()
	t.Chdir(work)
	flagFile := writeToken(t, t.TempDir(), "f", "from-file")
	envFile := writeToken(t, t.TempDir(), "e", "from-env-file")
	envDir := t.TempDir()
	writeToken(t, envDir, "admin.token", "from-data-dir")

	_, err := resolveAdmin(t)
	for _, w := range []string{"--admin-token-file", "IDGEN_ADMIN_TOKEN_FILE", "--admin-token", "IDGEN_ADMIN_TOKEN", "IDGEN_DATA_DIR", "data/admin.token"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("no token anywhere: %v; want it to name %s", err, w)
		}
	}
	writeToken(t, filepath.Join(work, "data"), "admin.token", "from-cwd")
	for _, c := range []struct {
		args                       []string
		envToken, envFile, dataDir string
		want                       string
	}{
		{[]string{"--admin-token", "flag"}, "env", "", envDir, "flag"},
		{[]string{"--admin-token-file", flagFile}, "env", "", envDir, "from-file"},
		{[]string{"--token", "old-flag"}, "", "", "", "old-flag"},
		{[]string{"--token-file", flagFile}, "", "", "", "from-file"},
		{nil, "env", "", envDir, "env"},
		{nil, "", envFile, envDir, "from-env-file"},
		{nil, "", "", envDir, "from-data-dir"},
		{nil, "", "", filepath.Join(work, "nothing-here"), "from-cwd"},
		{nil, "", "", "", "from-cwd"},
	} {
		t.Setenv("IDGEN_ADMIN_TOKEN", c.envToken)
		t.Setenv("IDGEN_ADMIN_TOKEN_FILE", c.envFile)
		t.Setenv("IDGEN_DATA_DIR", c.dataDir)
		got, err := resolveAdmin(t, c.args...)
		if err != nil || got != c.want {
			t.Errorf("%v, env %q %q %q: %q, %v; want %q", c.args, c.envToken, c.envFile, c.dataDir, got, err, c.want)
		}
	}
	cleanEnv(t)
	if _, err := resolveAdmin(t, "--admin-token-file", filepath.Join(work, "missing")); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
		t.Errorf("a missing --admin-token-file: %v", err)
	}
	empty := writeToken(t, t.TempDir(), "empty", "")
	if _, err := resolveAdmin(t, "--admin-token-file", empty); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("an empty token file: %v", err)
	}
}

// TestSecretBothFormsRefused: a secret given both as a value and as a file,
// on the command line or in the environment, is refused with a message
// naming both (issue 32: idctl silently used one); a flag given leaves the
// environment unread.
func TestSecretBothFormsRefused(t *testing.T) {
	cleanEnv(t)
	file := writeToken(t, t.TempDir(), "f", "from-file")
	for _, c := range []struct {
		args []string
		env  map[string]string
		want []string // in the usage error; nil: no error
	}{
		{[]string{"--admin-token", "x", "--admin-token-file", file}, nil, []string{"--admin-token and --admin-token-file are both given"}},
		{[]string{"--token", "x", "--admin-token-file", file}, nil, []string{"--admin-token and --admin-token-file are both given"}},
		{nil, map[string]string{"IDGEN_ADMIN_TOKEN": "x", "IDGEN_ADMIN_TOKEN_FILE": file}, []string{"IDGEN_ADMIN_TOKEN and IDGEN_ADMIN_TOKEN_FILE are both given"}},
		{[]string{"--admin-token-file", file}, map[string]string{"IDGEN_ADMIN_TOKEN": "x", "IDGEN_ADMIN_TOKEN_FILE": file}, nil},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		got, err := resolveAdmin(t, c.args...)
		var u usageError
		switch {
		case c.want == nil && (err != nil || got != "from-file"):
			t.Errorf("%v %v: %q, %v; want the flag's file", c.args, c.env, got, err)
		case c.want != nil && !errors.As(err, &u):
			t.Errorf("%v %v: %q, %v; want a usage error", c.args, c.env, got, err)
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: %v; want %q", c.args, c.env, err, w)
			}
		}
		cleanEnv(t)
	}
	// Through the commands: exit 2 before any call, for each secret.
	for _, args := range [][]string{
		{"get", "--biz", "b", "--client-token", "x", "--client-token-file", file},
		{"bench", "--biz", "b", "--requests", "1", "--client-token", "x", "--client-token-file", file},
		{"parse", "--addr", "127.0.0.1:1", "5000", "--client-token", "x", "--client-token-file", file},
		{"decode", "--biz", "b", "V", "--admin-token", "x", "--admin-token-file", file},
		{"workers", "--zk", "127.0.0.1:1", "--zk-auth", "u:p", "--zk-auth-file", file},
		{"cluster", "show", "--zk", "127.0.0.1:1", "--zk-auth", "u:p", "--zk-auth-file", file},
		{"db", "version", "--mysql", "u@tcp(h:1)/d", "--mysql-file", file},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 || !strings.Contains(errOut, "are both given") {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming both forms", args, code, errOut)
		}
	}
}

// TestAdminCommandsSendToken: every admin command sends the admin token it
// resolved, and with none found it refuses before calling the node.
func TestAdminCommandsSendToken(t *testing.T) {
	cleanEnv(t)
	t.Chdir(t.TempDir())
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	t.Setenv("IDGEN_ADMIN_TOKEN_FILE", writeToken(t, t.TempDir(), "admin", fakeAdmin))
	for _, c := range []struct {
		method string
		args   []string
	}{
		{"CreateBiz", []string{"biz", "create", "--biz", "a"}},
		{"UpdateBiz", []string{"biz", "update", "--biz", "a", "--step", "5"}},
		{"GetBiz", []string{"biz", "get", "--biz", "a"}},
		{"ListBiz", []string{"biz", "list"}},
		{"Decode", []string{"decode", "--biz", "coupon", "AA5PM8"}},
		{"CreateBizToken", []string{"biz", "token", "create", "--biz", "a"}},
		{"RevokeBizToken", []string{"biz", "token", "revoke", "--biz", "a", "--id", "t1"}},
		{"GetBiz", []string{"biz", "token", "list", "--biz", "tok"}},
	} {
		args := append(c.args, "--addr", addr)
		if code, _, errOut := runCLI(t, args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
			continue
		}
		if got := f.lastToken(c.method); got != fakeAdmin {
			t.Errorf("%v: %s carried %q, want the admin token", c.args, c.method, got)
		}
	}
	t.Setenv("IDGEN_ADMIN_TOKEN_FILE", "")
	f.mu.Lock()
	before := len(f.tokens["CreateBiz"])
	f.mu.Unlock()
	code, _, errOut := runCLI(t, "biz", "create", "--biz", "x", "--addr", addr)
	if code != 1 || !strings.Contains(errOut, "no admin token") || !strings.Contains(errOut, "--admin-token-file") {
		t.Errorf("no token: exit %d, %s", code, errOut)
	}
	checkOnePrefix(t, errOut)
	f.mu.Lock()
	after := len(f.tokens["CreateBiz"])
	f.mu.Unlock()
	if after != before {
		t.Error("the node was called without a token")
	}
}

// TestBizListPages: biz list follows ListBizResponse.next until the last
// page and prints every business.
func TestBizListPages(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_TOKEN", fakeAdmin)
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	code, out, errOut := runCLI(t, "biz", "list", "--addr", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, n := range []string{"b0", "b1", "b2", "b3", "b4"} {
		if !strings.Contains(out, n+" ") {
			t.Errorf("%s missing:\n%s", n, out)
		}
	}
	f.mu.Lock()
	got := strings.Join(f.afters, ",")
	f.mu.Unlock()
	if got != ",b1,b3" {
		t.Errorf("pages asked after %q, want \",b1,b3\"", got)
	}
}

// TestBizQuotaFlags: --id-quota and --id-burst are sent on create and
// update only when given, and biz get shows them.
func TestBizQuotaFlags(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_TOKEN", fakeAdmin)
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	code, out, errOut := runCLI(t, "biz", "create", "--addr", addr, "--biz", "q", "--id-quota", "1000", "--id-burst", "50")
	if code != 0 || !strings.Contains(out, "1000/s burst 50") || !strings.Contains(out, "ID-QUOTA") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	f.mu.Lock()
	last := f.creates[len(f.creates)-1]
	f.mu.Unlock()
	if last.GetIdQuota() != 1000 || last.GetIdBurst() != 50 {
		t.Errorf("sent id_quota %v id_burst %v", last.IdQuota, last.IdBurst)
	}
	if code, _, _ := runCLI(t, "biz", "create", "--addr", addr, "--biz", "r"); code != 0 {
		t.Fatal("create without quota flags failed")
	}
	f.mu.Lock()
	last = f.creates[len(f.creates)-1]
	f.mu.Unlock()
	if last.IdQuota != nil || last.IdBurst != nil {
		t.Errorf("quota sent although not given: %v %v", last.IdQuota, last.IdBurst)
	}
	code, out, _ = runCLI(t, "biz", "get", "--addr", addr, "--biz", "q")
	if code != 0 || !strings.Contains(out, "1000/s burst 50") {
		t.Errorf("biz get: exit %d:\n%s", code, out)
	}
}

// TestBizTokenCommands: create prints the secret once with the warning,
// revoke says how many are left, list shows ids and labels, never secrets.
func TestBizTokenCommands(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_TOKEN", fakeAdmin)
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	code, out, errOut := runCLI(t, "biz", "token", "create", "--addr", addr, "--biz", "tok", "--label", "billing")
	if code != 0 || !strings.Contains(out, "secret: s3cr3t-shown-once-0123456789") || !strings.Contains(out, "not shown again") ||
		!strings.Contains(out, "label:  billing") {
		t.Errorf("create: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "biz", "token", "revoke", "--addr", addr, "--biz", "tok", "--id", "t1")
	if code != 0 || !strings.Contains(out, "revoked token t1 of tok; 0 left") {
		t.Errorf("revoke: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "biz", "token", "revoke", "--addr", addr, "--biz", "tok", "--id", "nope")
	if code != 1 || errOut != "idctl: INVALID_ARGUMENT: no token nope\n" {
		t.Errorf("revoke of an unknown id: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut = runCLI(t, "biz", "token", "list", "--addr", addr, "--biz", "tok")
	if code != 0 || !strings.Contains(out, "t1") || !strings.Contains(out, "billing") || !strings.Contains(out, "ops") ||
		!strings.Contains(out, "2023-11-14T22:13:20Z") {
		t.Errorf("list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "biz", "token", "list", "--addr", addr, "--biz", "plain")
	if code != 0 || !strings.Contains(out, "no client token of its own") {
		t.Errorf("list of a business without tokens: exit %d, %q", code, out)
	}
}

// TestParseSendsClientToken: parse --addr sends --client-token, else the
// file of IDGEN_CLIENT_TOKEN_FILE, else the admin token if one is found,
// else no token.
func TestParseSendsClientToken(t *testing.T) {
	cleanEnv(t)
	t.Chdir(t.TempDir())
	f := &fakeNode{}
	addr := startFakeNode(t, f)
	parse := func(args ...string) string {
		t.Helper()
		if code, _, errOut := runCLI(t, append([]string{"parse", "--addr", addr, "5000"}, args...)...); code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		return f.lastToken("ParseID")
	}
	if got := parse(); got != "<none>" {
		t.Errorf("no token anywhere: sent %q", got)
	}
	t.Setenv("IDGEN_ADMIN_TOKEN", fakeAdmin)
	if got := parse(); got != fakeAdmin {
		t.Errorf("admin token only: sent %q, want the admin token", got)
	}
	t.Setenv("IDGEN_CLIENT_TOKEN_FILE", writeToken(t, t.TempDir(), "client", fakeClient))
	if got := parse(); got != fakeClient {
		t.Errorf("IDGEN_CLIENT_TOKEN_FILE: sent %q", got)
	}
	if got := parse("--client-token", "flag-client-token-0123456789"); got != "flag-client-token-0123456789" {
		t.Errorf("--client-token: sent %q", got)
	}
}

// TestAgainstRealNode: on a real node started with no admin token (it
// generates data/admin.token), idctl run from the node's directory needs no
// token flag; from elsewhere it needs IDGEN_DATA_DIR (or a flag), and a
// wrong token is refused by the node.
func TestAgainstRealNode(t *testing.T) {
	cleanEnv(t)
	work := t.TempDir()
	n := testnode.Start(t, testnode.Options{DataDir: filepath.Join(work, "data"), NodeAdminToken: true})
	t.Chdir(work)
	code, out, errOut := runCLI(t, "biz", "create", "--addr", n.RPCAddr, "--biz", "order", "--channel", "unordered")
	if code != 0 || !strings.Contains(out, "order") {
		t.Fatalf("biz create from the node's directory: exit %d, stdout %q, stderr %q\nnode logs:\n%s", code, out, errOut, n.Logs())
	}
	code, out, errOut = runCLI(t, "biz", "list", "--addr", n.RPCAddr)
	if code != 0 || !strings.Contains(out, "order") {
		t.Fatalf("biz list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Chdir(t.TempDir())
	code, _, errOut = runCLI(t, "biz", "get", "--addr", n.RPCAddr, "--biz", "order")
	if code != 1 || !strings.Contains(errOut, "no admin token") {
		t.Fatalf("biz get from elsewhere: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("IDGEN_DATA_DIR", filepath.Join(work, "data"))
	code, out, errOut = runCLI(t, "biz", "get", "--addr", n.RPCAddr, "--biz", "order")
	if code != 0 || !strings.Contains(out, "UNORDERED") {
		t.Fatalf("biz get with IDGEN_DATA_DIR: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "biz", "get", "--addr", n.RPCAddr, "--biz", "order", "--admin-token", "a-wrong-token-0123456789")
	if code != 1 || !strings.HasPrefix(errOut, "idctl: UNAUTHENTICATED: wrong admin token") {
		t.Fatalf("a wrong token: exit %d, stderr %q", code, errOut)
	}
	// Token management: the server side may not be there yet.
	code, out, errOut = runCLI(t, "biz", "token", "create", "--addr", n.RPCAddr, "--biz", "order", "--label", "test")
	if code != 0 {
		if strings.Contains(errOut, "not yet") {
			t.Logf("biz token create: the node does not implement CreateBizToken yet: %s", errOut)
			return
		}
		t.Fatalf("biz token create: exit %d, stderr %q", code, errOut)
	}
	id := fieldAfter(out, "id:")
	if !strings.Contains(out, "not shown again") || id == "" {
		t.Fatalf("biz token create printed %q", out)
	}
	if code, out, errOut = runCLI(t, "biz", "token", "list", "--addr", n.RPCAddr, "--biz", "order"); code != 0 || !strings.Contains(out, id) {
		t.Fatalf("biz token list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut = runCLI(t, "biz", "token", "revoke", "--addr", n.RPCAddr, "--biz", "order", "--id", id); code != 0 || !strings.Contains(out, "0 left") {
		t.Fatalf("biz token revoke: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// fieldAfter returns the first word after label in text ("" if absent).
func fieldAfter(text, label string) string {
	_, rest, ok := strings.Cut(text, label)
	if !ok {
		return ""
	}
	if f := strings.Fields(rest); len(f) > 0 {
		return f[0]
	}
	return ""
}
