package worker

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/idgen/idgen/cluster/incarnation"
)

// The incarnation check and the lease share the properties file: each
// keeps the other's keys, a file with the incarnation alone caches no
// slot, and a file from an older idgen reads as no incarnation.
func TestPropertiesIncarnationKeys(t *testing.T) {
	dir := t.TempDir()
	path := propertiesPath(dir, "idgen", 8888, "10.0.0.1")
	rec := IncarnationRecord(dir, "idgen", 8888, "10.0.0.1", "c1")
	if l, err := rec.Load(); err != nil || l != (incarnation.Local{}) {
		t.Fatalf("no file: %+v, %v", l, err)
	}
	inc := incarnation.Local{ID: "abc", Node: "idgen:8888:10.0.0.1-00ff00ff", Version: 1, Token: "t1", Counter: 1}
	if err := rec.Save(inc); err != nil {
		t.Fatal(err)
	}
	// Saved before the node held a slot: no cached slot for the lease.
	if _, _, found, err := readAnyProperties(path, "idgen", "c1", -1); err != nil || found {
		t.Fatalf("incarnation-only file counted as a cached slot: found %v, %v", found, err)
	}
	slot := properties{Cluster: "c1", IDC: 1, Node: 2, WorkerID: 258, HighWater: 1700000000000,
		Meta: Meta{EpochMs: DefaultEpochMs, IDCBits: 2, NodeBits: 8, CreatedMs: 1690000000000}}
	if err := writeProperties(path, slot); err != nil {
		t.Fatal(err)
	}
	if l, err := rec.Load(); err != nil || l != inc {
		t.Fatalf("the lease's write lost the incarnation: %+v, %v", l, err)
	}
	inc.Version, inc.Token = 2, "t2"
	if err := rec.Save(inc); err != nil {
		t.Fatal(err)
	}
	got, _, found, err := readAnyProperties(path, "idgen", "c1", -1)
	if err != nil || !found {
		t.Fatalf("read back: found %v, %v", found, err)
	}
	want := slot
	want.Incarnation = inc
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the incarnation's write changed the slot: got %+v, want %+v", got, want)
	}
	b, _ := os.ReadFile(path)
	for _, k := range []string{"incarnation.id=abc", "incarnation.lineage=2:t2", "workerId=258"} {
		if !strings.Contains(string(b), k) {
			t.Errorf("file lacks %q:\n%s", k, b)
		}
	}
	// A new address (same data dir) finds the incarnation of the old one.
	if l, err := IncarnationRecord(dir, "idgen", 8888, "10.0.0.9", "c1").Load(); err != nil || l != inc {
		t.Fatalf("new address: %+v, %v; want the old address's record", l, err)
	}
	// A file from an older idgen: readable, no incarnation.
	old := filepath.Join(dir, "idgen:9999:h.properties")
	if err := os.WriteFile(old, []byte("cluster=c1\nidc=0\nnode=1\nworkerId=1\nhighWater=5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := readProperties(old); err != nil || p.Incarnation != (incarnation.Local{}) || p.noSlot {
		t.Fatalf("old file: %+v, %v", p, err)
	}
	// Another cluster's file is no record of this one, and is replaced.
	other := IncarnationRecord(dir, "idgen", 8888, "10.0.0.1", "c2")
	if l, err := other.Load(); err != nil || l != (incarnation.Local{}) {
		t.Fatalf("another cluster's file: %+v, %v; want no record", l, err)
	}
	if err := other.Save(inc); err != nil {
		t.Fatal(err)
	}
	if p, err := readProperties(path); err != nil || p.Cluster != "c2" || !p.noSlot || p.Incarnation != inc {
		t.Fatalf("after another cluster's save: %+v, %v", p, err)
	}
	// Unreadable incarnation keys: the slot still reads, the record does not.
	bad := filepath.Join(dir, "idgen:7777:h.properties")
	if err := os.WriteFile(bad, []byte("cluster=c1\nidc=0\nnode=1\nworkerId=1\nhighWater=5\nincarnation.id=x\nincarnation.node=n\nincarnation.lineage=zz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := readProperties(bad); err != nil || p.WorkerID != 1 {
		t.Fatalf("slot of a file with a bad incarnation key: %+v, %v", p, err)
	}
	if _, err := IncarnationRecord(dir, "idgen", 7777, "h", "c1").Load(); err == nil || !strings.Contains(err.Error(), "incarnation.lineage") {
		t.Fatalf("bad incarnation key: %v, want an error naming it", err)
	}
}
