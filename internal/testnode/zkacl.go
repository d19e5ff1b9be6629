package testnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/worker"
)

// ACLCluster creates the cluster znode /<root>/<name> on the ZooKeeper at
// servers, readable and writable by the digest user auth (user:password)
// only, as `idctl cluster init` with ZooKeeper auth protects a cluster,
// and removes it when the test ends. Give each test its own name.
//
// Only that znode carries the ACL; its parents are created open. A
// shared path under an ACL whose credential ends with the test (a
// random one) would stay there, and no later test could create anything
// under it on a shared server.
func ACLCluster(t testing.TB, servers []string, root, name, auth string) {
	t.Helper()
	acl, err := cluster.ACL(auth)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := worker.DialZK(ctx, servers, 10*time.Second, auth, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := cluster.Path(root, name)
	// One cleanup, so the removal runs before the connection closes.
	t.Cleanup(func() {
		if err := conn.Delete(base, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("remove %s: %v", base, err)
		}
		conn.Close()
	})
	if err := cluster.EnsurePath(conn, root, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Create(base, nil, 0, acl); err != nil {
		t.Fatal(err)
	}
}
