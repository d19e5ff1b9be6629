package resolver_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/internal/testnode"
	"github.com/idgen/idgen/resolver"
)

// TestZKAuthFileRefused: both forms of the credential, and a file other
// users may read, are refused by New before it dials.
func TestZKAuthFileRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  resolver.Config
		want string
	}{
		{resolver.Config{ZKAuth: "u:p", ZKAuthFile: testnode.WriteSecretFile(t, "u:p\n", 0o600)}, "Config.ZKAuth and Config.ZKAuthFile are both set"},
		{resolver.Config{ZKAuthFile: testnode.WriteSecretFile(t, "u:p\n", 0o644)}, "chmod 600"},
		{resolver.Config{ZKAuthFile: testnode.WriteSecretFile(t, "\n", 0o600)}, "is empty"},
	} {
		tc.cfg.ZK = []string{"127.0.0.1:1"} // never dialled
		if r, err := resolver.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			if r != nil {
				_ = r.Close()
			}
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.cfg, err, tc.want)
		}
	}
}

// TestZKAuthFile: a cluster whose znodes only the digest user may read is
// listed with the credential from Config.ZKAuthFile, and refused without.
func TestZKAuthFile(t *testing.T) {
	zkAddr := testZK(t)
	auth := fmt.Sprintf("resolver%d:pw%d", rand.Uint32(), rand.Uint64())
	name := uniqueCluster(t)
	testnode.ACLCluster(t, []string{zkAddr}, testRoot, name, auth)

	if r, err := resolver.New(resolver.Config{ZK: []string{zkAddr}, ZKRoot: testRoot, Cluster: name}); !errors.Is(err, zk.ErrNoAuth) || !strings.Contains(err.Error(), "set Config.ZKAuthFile") {
		if r != nil {
			_ = r.Close()
		}
		t.Fatalf("New without the credential: %v, want ZooKeeper's no-auth refusal naming Config.ZKAuthFile", err)
	}
	newResolver(t, resolver.Config{ZK: []string{zkAddr}, ZKRoot: testRoot, Cluster: name, ZKAuthFile: testnode.WriteSecretFile(t, auth+"\n", 0o600)})
}
