package mysqlstore

import (
	"errors"
	"strings"
	"testing"
)

// TestBinding_OneClusterPerDatabase: the first cluster binds the database;
// the same cluster passes again; a cluster of another name, or of the same
// name created at another time, is refused naming the fix; after
// `idctl db unbind` the next cluster binds it (issue 29, hole k).
func TestBinding_OneClusterPerDatabase(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s := openStore(t, dsn, nil)
	ctx := testCtx(t)
	if _, ok, err := s.Binding(ctx); err != nil || ok {
		t.Fatalf("Binding of a new database: ok %v, %v; want none", ok, err)
	}
	b, err := s.BindCluster(ctx, "default", 1000, "10.0.0.1:9090")
	if err != nil || b.Cluster != "default" || b.CreatedMs != 1000 || b.BoundBy != "10.0.0.1:9090" {
		t.Fatalf("first bind: %+v, %v", b, err)
	}
	if _, err := s.BindCluster(ctx, "default", 1000, "10.0.0.2:9090"); err != nil {
		t.Fatalf("second node of the same cluster: %v", err)
	}
	for _, tc := range []struct {
		name    string
		cluster string
		created int64
		want    []string
	}{
		{"other name", "payments", 1000, []string{`belongs to cluster "default"`, `cluster "payments"`, "its own database", "idctl db unbind"}},
		{"same name, other cluster", "default", 2000, []string{"another cluster of the same name", "its own database"}},
	} {
		_, err := s.BindCluster(ctx, tc.cluster, tc.created, "10.0.0.3:9090")
		if !errors.Is(err, ErrOtherCluster) {
			t.Fatalf("%s: %v, want ErrOtherCluster", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
	}
	old, ok, err := Unbind(ctx, dsn)
	if err != nil || !ok || old.Cluster != "default" {
		t.Fatalf("Unbind: %+v, %v, %v", old, ok, err)
	}
	if _, err := s.BindCluster(ctx, "payments", 3000, "10.0.0.3:9090"); err != nil {
		t.Fatalf("bind after unbind: %v", err)
	}
}

// TestBinding_IncarnationWitness: the witness of the ZooKeeper
// incarnation lives in the binding row, for the bound cluster only, and
// its counter never goes down (schema 10, package cluster/incarnation).
func TestBinding_IncarnationWitness(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s := openStore(t, dsn, nil)
	ctx := testCtx(t)
	if _, _, bound, err := s.ZKIncarnation(ctx, "c1"); err != nil || bound {
		t.Fatalf("unbound database: bound %v, %v", bound, err)
	}
	if err := s.RaiseZKIncarnation(ctx, "c1", "inc-a", 5); err != nil {
		t.Fatalf("raise on an unbound database: %v", err)
	}
	if _, err := s.BindCluster(ctx, "c1", 1000, "n1"); err != nil {
		t.Fatal(err)
	}
	if id, n, bound, err := s.ZKIncarnation(ctx, "c1"); err != nil || !bound || id != "" || n != 0 {
		t.Fatalf("freshly bound: %q %d %v %v", id, n, bound, err)
	}
	for _, step := range []struct {
		id string
		n  int64
	}{{"inc-a", 5}, {"inc-b", 3}, {"inc-a", 9}} {
		if err := s.RaiseZKIncarnation(ctx, "c1", step.id, step.n); err != nil {
			t.Fatal(err)
		}
	}
	if id, n, _, err := s.ZKIncarnation(ctx, "c1"); err != nil || id != "inc-a" || n != 9 {
		t.Fatalf("after raises 5, 3, 9: id %q counter %d, %v; want inc-a, 9", id, n, err)
	}
	if _, _, bound, err := s.ZKIncarnation(ctx, "other"); err != nil || bound {
		t.Fatalf("another cluster: bound %v, %v", bound, err)
	}
	if err := s.RaiseZKIncarnation(ctx, "other", "inc-x", 100); err != nil {
		t.Fatal(err)
	}
	if _, n, _, _ := s.ZKIncarnation(ctx, "c1"); n != 9 {
		t.Fatalf("another cluster's raise moved the counter to %d", n)
	}
}
