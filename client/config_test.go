package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/internal/testnode"
)

// TestTokenFile: the token read from Config.TokenFile (trimmed) is the one
// every request carries.
func TestTokenFile(t *testing.T) {
	var s seq
	n := &fakeNode{addr: "a:1", answer: s.serve}
	c := newFakeClient(t, newFakeClock(), Config{TokenFile: testnode.WriteSecretFile(t, "  client-token-0123456789\n", 0o600)}, n)
	if _, err := c.Next(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ordered(context.Background(), "x", "k", 1); err != nil {
		t.Fatal(err)
	}
	for i, req := range n.reqs {
		if got := req.GetToken(); got != "client-token-0123456789" {
			t.Errorf("request %d carried token %q", i, got)
		}
	}
}

// TestZKAuthFile: Config.ZKAuthFile fills the credential New dials
// ZooKeeper with.
func TestZKAuthFile(t *testing.T) {
	cfg := Config{ZK: []string{"z:2181"}, ZKAuthFile: testnode.WriteSecretFile(t, "idgen:s3cret\n", 0o400)}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	if cfg.ZKAuth != "idgen:s3cret" {
		t.Fatalf("ZKAuth = %q, want idgen:s3cret", cfg.ZKAuth)
	}
}

// TestSecretFileErrors: both forms of one secret, a missing, empty or
// blank file, and a file other users may read (the server's rule) are
// refused by New with ErrInvalid and a message naming the setting.
func TestSecretFileErrors(t *testing.T) {
	ok := testnode.WriteSecretFile(t, "tok\n", 0o600)
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
		is   error
	}{
		{"Token and TokenFile", Config{Token: "t", TokenFile: ok}, []string{"Config.Token and Config.TokenFile are both set"}, nil},
		{"ZKAuth and ZKAuthFile", Config{ZKAuth: "u:p", ZKAuthFile: ok}, []string{"Config.ZKAuth and Config.ZKAuthFile are both set"}, nil},
		{"missing", Config{TokenFile: filepath.Join(t.TempDir(), "none")}, []string{"Config.TokenFile: "}, fs.ErrNotExist},
		{"empty", Config{TokenFile: testnode.WriteSecretFile(t, "", 0o600)}, []string{"Config.TokenFile: ", "is empty"}, nil},
		{"blank", Config{ZKAuthFile: testnode.WriteSecretFile(t, " \n", 0o600)}, []string{"Config.ZKAuthFile: ", "is empty"}, nil},
		{"readable by others", Config{TokenFile: testnode.WriteSecretFile(t, "tok\n", 0o644)}, []string{"Config.TokenFile: ", "chmod 600"}, nil},
		{"group-readable own file", Config{ZKAuthFile: testnode.WriteSecretFile(t, "u:p\n", 0o640)}, []string{"Config.ZKAuthFile: ", "chmod 600"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Addrs = []string{"a:1"}
			c, err := New(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v: not ErrInvalid", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v: not %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: does not say %q", err, w)
				}
			}
		})
	}
}

// TestIntegration_ZKAuthFile: against the real ZooKeeper, a cluster whose
// znodes only the digest user may read is listed with the credential
// from Config.ZKAuthFile, and refused without it.
func TestIntegration_ZKAuthFile(t *testing.T) {
	zkAddr := os.Getenv("IDGEN_TEST_ZK")
	if zkAddr == "" {
		t.Skip("IDGEN_TEST_ZK not set: run ./build.sh test (it starts ZooKeeper), or source .testenv")
	}
	servers := strings.Split(zkAddr, ",")
	auth := fmt.Sprintf("client%d:pw%d", rand.Uint32(), rand.Uint64())
	root, name := "/idgen-test-client", fmt.Sprintf("acl-%d", rand.Uint64())
	testnode.ACLCluster(t, servers, root, name, auth)

	_, err := New(Config{ZK: servers, ZKRoot: root, Cluster: name})
	if !errors.Is(err, zk.ErrNoAuth) || !strings.Contains(err.Error(), "set Config.ZKAuthFile") {
		t.Fatalf("New without the credential: %v, want ZooKeeper's no-auth refusal naming Config.ZKAuthFile", err)
	}
	c, err := New(Config{ZK: servers, ZKRoot: root, Cluster: name, ZKAuthFile: testnode.WriteSecretFile(t, auth+"\n", 0o600)})
	if err != nil {
		t.Fatalf("New with ZKAuthFile: %v", err)
	}
	defer c.Close()
	if a := c.Addrs(); len(a) != 0 { // the listing worked; the cluster has no member
		t.Fatalf("listed %v, want no member", a)
	}
}
