package testnode

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cloudwego/kitex/pkg/endpoint"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// NewToken returns a random token (32 bytes, base64url), as a node
// generates for itself.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// WriteTokenFile writes token to a new file (mode 0600) in dir and returns
// its path, for --admin-token-file or --client-token-file.
func WriteTokenFile(t testing.TB, dir, name, token string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteSecretFile writes content to a new file of mode perm (set after the
// write, past the umask) in a fresh temp dir and returns its path: secret
// files that pass or fail internal/secretfile's mode rule.
func WriteSecretFile(t testing.TB, content string, perm fs.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

// TokenMiddleware is a test-only convenience: a Kitex client middleware
// that fills the token field, when the caller left it unset, of the admin
// requests (CreateBiz, UpdateBiz, GetBiz, ListBiz, Decode, CreateBizToken,
// RevokeBizToken) and of ParseID, Clock and ListWorkers (where a node
// accepts the admin token in place of its client token), so that tests
// written before admin RPCs needed a token keep working. The caller's
// request is not modified: the filled one is a copy. NextIDs is left
// alone: which token it needs is the business's rule, for each test to
// state.
//
// Real clients set the token themselves; tests of the refusals use a
// client without this middleware (Node.BareClient).
func TokenMiddleware(token string) endpoint.Middleware {
	return func(next endpoint.Endpoint) endpoint.Endpoint {
		return func(ctx context.Context, req, resp any) error {
			fillToken(req, token)
			return next(ctx, req, resp)
		}
	}
}

// fillToken sets the token of the request inside args (the generated
// *IDGenService...Args) when it is unset.
func fillToken(args any, token string) {
	tok := &token
	switch a := args.(type) {
	case *idl.IDGenServiceCreateBizArgs:
		if a.Req != nil && a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceUpdateBizArgs:
		if a.Req != nil && a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceGetBizArgs:
		if a.Req != nil && a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceListBizArgs:
		if a.Req == nil {
			a.Req = &idl.ListBizRequest{}
		}
		if a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceDecodeArgs:
		if a.Req != nil && a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceCreateBizTokenArgs:
		if a.Req != nil && a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceRevokeBizTokenArgs:
		if a.Req != nil && a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceParseIDArgs:
		if a.Req != nil && a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceClockArgs:
		if a.Req == nil {
			a.Req = &idl.ClockRequest{}
		}
		if a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	case *idl.IDGenServiceListWorkersArgs:
		if a.Req == nil {
			a.Req = &idl.ListWorkersRequest{}
		}
		if a.Req.Token == nil {
			r := *a.Req
			r.Token, a.Req = tok, &r
		}
	}
}

// flagValue returns the value of --name in args (either "--name v" or
// "--name=v") and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// envValue returns the value of name in env ("K=V" entries) and whether it
// is there.
func envValue(env []string, name string) (string, bool) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// readToken reads a token file as the node does (surrounding space
// trimmed); "" when it cannot be read.
func readToken(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
