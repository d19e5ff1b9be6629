package zkstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/segment"
)

// dialRaw connects a plain go-zookeeper client, with the digest credential
// auth when not empty, and waits for its session.
func dialRaw(t *testing.T, addr, auth string) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.After(30 * time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-deadline:
			t.Fatalf("no ZooKeeper session with %s", addr)
		}
	}
	go func() {
		for range events {
		}
	}()
	if auth != "" {
		if err := c.AddAuth("digest", []byte(auth)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// subtree returns p and every znode below it, parents first.
func subtree(t *testing.T, c *zk.Conn, p string) []string {
	t.Helper()
	children, _, err := c.Children(p)
	if err != nil {
		t.Fatalf("list %s with the credential: %v", p, err)
	}
	slices.Sort(children)
	out := []string{p}
	for _, ch := range children {
		out = append(out, subtree(t, c, path.Join(p, ch))...)
	}
	return out
}

// TestIntegration_ACLSubtreeClosedWithoutCredential (issue 19, item 8):
// with Config.Auth set, a client without the digest can neither read nor
// change anything under /<root>/<cluster>: the cluster znode, the
// record and clock of `idctl cluster init`, the biz directory and each
// business (whose data holds the secret key and the token hashes). Get,
// Set, Create (a child), Delete and Children all fail with ErrNoAuth. It
// also covers the clock znode re-created by a reader that passes a world
// ACL (worker.ListWorkers does), which must still carry the cluster's ACL.
func TestIntegration_ACLSubtreeClosedWithoutCredential(t *testing.T) {
	addr := testZK(t)
	ctx := context.Background()
	root := "/idgen-zkstore-acl-test"
	name := fmt.Sprintf("c%d", rand.Uint32())
	auth := fmt.Sprintf("acl%d:pw-%d", rand.Uint32(), rand.Uint32())
	clusterPath := cluster.Path(root, name)

	owner := dialRaw(t, addr, auth)
	acl, err := cluster.ACL(auth)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Init(owner, root, name, cluster.Settings{IDCBits: 2, NodeBits: 8}, acl); err != nil {
		t.Fatalf("cluster.Init: %v", err)
	}
	s, err := Open(ctx, Config{Servers: []string{addr}, Root: root, Cluster: name, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	h := sha256.Sum256([]byte("client secret"))
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "order", Obfuscate: true,
		Tokens: []segment.BizToken{{ID: "ci", Hash: h[:]}}}); err != nil {
		t.Fatalf("CreateBiz with Auth: %v", err)
	}
	// A reader without the cluster's ACL at hand re-creates a missing
	// clock znode (worker.ListWorkers passes a world ACL).
	if err := owner.Delete(cluster.ClockPath(root, name), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Now(owner, root, name, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("cluster.Now: %v", err)
	}

	nodes := subtree(t, owner, clusterPath)
	for _, want := range []string{cluster.MetaPath(root, name), cluster.ClockPath(root, name), s.dir, path.Join(s.dir, "order")} {
		if !slices.Contains(nodes, want) {
			t.Fatalf("subtree %v lacks %s: the test would prove nothing about it", nodes, want)
		}
	}
	stranger := dialRaw(t, addr, "")
	for _, p := range nodes {
		if _, _, err := stranger.Get(p); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("Get %s without the credential: %v, want ErrNoAuth (world-readable)", p, err)
		}
		if _, _, err := stranger.Children(p); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("Children %s without the credential: %v, want ErrNoAuth", p, err)
		}
		if _, err := stranger.Set(p, []byte(`{"step":1}`), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("Set %s without the credential: %v, want ErrNoAuth (world-writable)", p, err)
		}
		if _, err := stranger.Create(p+"/probe", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("Create under %s without the credential: %v, want ErrNoAuth", p, err)
		}
		err := stranger.Delete(p, -1)
		if p == clusterPath {
			// Deleting a znode is a permission of its parent: the root,
			// open by design (clusters with different credentials share
			// it). The cluster znode is never empty, so ZooKeeper
			// refuses; what matters is that it is refused.
			if !errors.Is(err, zk.ErrNoAuth) && !errors.Is(err, zk.ErrNotEmpty) {
				t.Errorf("Delete %s without the credential: %v, want ErrNoAuth or ErrNotEmpty", p, err)
			}
			continue
		}
		if !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("Delete %s without the credential: %v, want ErrNoAuth", p, err)
		}
	}
	// Nothing above changed the subtree, and the owner still reads it.
	if got := subtree(t, owner, clusterPath); !slices.Equal(got, nodes) {
		t.Errorf("subtree changed by refused calls: %v, was %v", got, nodes)
	}
	if b, err := s.GetBiz(ctx, "order"); err != nil || len(b.Tokens) != 1 {
		t.Errorf("GetBiz with the credential after the probes: %+v, %v", b, err)
	}
	// The business store itself refuses to work without the credential.
	other, err := Open(ctx, Config{Servers: []string{addr}, Root: root, Cluster: name})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.GetBiz(ctx, "order"); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("zkstore without Auth: GetBiz = %v, want ErrNoAuth", err)
	}
}

// TestIntegration_ACLOpenWithoutAuth: without Config.Auth the subtree
// stays open to every client, as before issue 19 (clusters that never set
// a credential keep working with tools that have none).
func TestIntegration_ACLOpenWithoutAuth(t *testing.T) {
	addr := testZK(t)
	ctx := context.Background()
	s := open(t, addr, fmt.Sprintf("c%d", rand.Uint32()))
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "open"}); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, addr, "")
	for _, p := range []string{path.Dir(s.dir), s.dir, path.Join(s.dir, "open")} {
		acl, _, err := c.GetACL(p)
		if err != nil || !slices.Equal(acl, zk.WorldACL(zk.PermAll)) {
			t.Errorf("ACL of %s without Auth: %v, %v; want world:anyone all", p, acl, err)
		}
	}
}

// TestIntegration_ACLNestedRoot: with a root of several components that
// does not exist yet, the store creates every component of the root open
// (clusters with other credentials share it, as cluster.Init makes it)
// and the cluster's znode and below with the digest ACL.
func TestIntegration_ACLNestedRoot(t *testing.T) {
	addr := testZK(t)
	ctx := context.Background()
	top := fmt.Sprintf("/idgen-zkstore-acl-test-%d", rand.Uint32())
	root := top + "/nested"
	auth := fmt.Sprintf("acl%d:pw", rand.Uint32())
	s, err := Open(ctx, Config{Servers: []string{addr}, Root: root, Cluster: "c", Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	digest, _ := cluster.ACL(auth)
	c := dialRaw(t, addr, auth)
	for p, want := range map[string][]zk.ACL{
		top:                     zk.WorldACL(zk.PermAll),
		root:                    zk.WorldACL(zk.PermAll),
		cluster.Path(root, "c"): digest,
		s.dir:                   digest,
		path.Join(s.dir, "b"):   digest,
	} {
		if got, _, err := c.GetACL(p); err != nil || !slices.Equal(got, want) {
			t.Errorf("ACL of %s: %v, %v; want %v", p, got, err, want)
		}
	}
	// Leave the test server as it was: the top znodes are this test's own.
	for _, p := range []string{path.Join(s.dir, "b"), s.dir, cluster.Path(root, "c"), root, top} {
		if err := c.Delete(p, -1); err != nil {
			t.Logf("clean up %s: %v", p, err)
		}
	}
}
