package worker

import (
	"testing"
	"time"

	"github.com/idgen/idgen/cluster"
)

// TestClaimBoundCoversAClockBehindZooKeeper: after a restore, the bound a
// slot taker waits past is a floor for the milliseconds of its IDs. A
// host 1.66 s behind ZooKeeper's clock must not issue below the bound in
// ZooKeeper's milliseconds (where the previous holders stamped theirs);
// a host ahead of it waits for the bound converted to its clock.
func TestClaimBoundCoversAClockBehindZooKeeper(t *testing.T) {
	cfg := Config{HeartbeatInterval: 100 * time.Millisecond, OutageTolerance: 300 * time.Millisecond,
		HighWaterMargin: 50 * time.Millisecond, MaxPeerClockSkew: time.Second}
	const restored = int64(1_795_700_028_750) // ZooKeeper's time of the restore
	lead := (cfg.Lead() + cfg.MaxPeerClockSkew).Milliseconds()
	for _, tc := range []struct {
		name   string
		offset int64 // this host's clock minus ZooKeeper's, ms
		want   int64
	}{
		{"behind", -1660, restored + lead},
		{"ahead", 700, restored + lead + 700},
		{"same", 0, restored + lead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &ZKLease{cfg: cfg}
			l.rec = cluster.Record{RestoredMs: restored, Init: true}
			l.zkNow = cluster.Time{Ms: restored, Local: time.UnixMilli(restored + tc.offset)}
			if got := l.claimBound(true); got != tc.want {
				t.Fatalf("claim bound %d, want %d (%+d ms)", got, tc.want, got-tc.want)
			}
		})
	}
}

// TestClaimBoundControl: the negative control
// (IDGEN_FAULT_CONVERTED_CLAIM_BOUND=1, faultinject builds only) takes
// the converted reading alone, and then the host behind ZooKeeper's clock
// gets a bound 1.66 s too early: the check above can fail. Run it with
// `go test -tags faultinject -run TestClaimBound ./worker/`.
func TestClaimBoundControl(t *testing.T) {
	t.Setenv("IDGEN_FAULT_CONVERTED_CLAIM_BOUND", "1")
	cfg := Config{MaxPeerClockSkew: time.Second}
	const restored = int64(1_795_700_028_750)
	l := &ZKLease{cfg: cfg}
	l.rec = cluster.Record{RestoredMs: restored, Init: true}
	l.zkNow = cluster.Time{Ms: restored, Local: time.UnixMilli(restored - 1660)}
	want := restored + (cfg.Lead() + cfg.MaxPeerClockSkew).Milliseconds()
	if faultConvertedClaimBound() {
		want -= 1660 // the hole: below what the previous holders used
	}
	if got := l.claimBound(true); got != want {
		t.Fatalf("claim bound %d, want %d (control on: %v)", got, want, faultConvertedClaimBound())
	}
}
