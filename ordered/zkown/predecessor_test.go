package zkown

import (
	"os"
	"os/exec"
	"testing"
)

// A node restarted at the same address takes its dead predecessor's
// shards at once when it proves the predecessor dead (same address, boot
// and pid namespace, pid gone), and waits the full lease from first sight
// otherwise: the negative controls are the same restart without one part
// of the proof.
func TestDeadPredecessorTakenWithoutLeaseWait(t *testing.T) {
	const host, oldPID, newPID = "boot-1/pid:[4026531836]", 100, 200
	for _, tc := range []struct {
		name     string
		self     string // the restarted node's address
		host     string // the restarted node's Host
		gone     bool   // the old pid no longer exists
		wantWait bool
	}{
		{"proof", addrA, host, true, false},
		{"pid still exists (a zombie, or reused)", addrA, host, false, true},
		{"another boot or pid namespace", addrA, "boot-2/pid:[4026531836]", true, true},
		{"another address on the same host", addrB, host, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			old := w.node(addrA, func(c *Config) {
				c.pid, c.host = oldPID, host
				c.processGone = func(int) bool { return false }
			})
			old.step()
			checkAssignment(t, w, old)
			// SIGKILL: the old process never steps again; its znode
			// stays (its session has not timed out).
			w.clk.Add(testTick)
			var asked []int
			n := w.node(tc.self, func(c *Config) {
				c.pid, c.host = newPID, tc.host
				c.processGone = func(pid int) bool { asked = append(asked, pid); return tc.gone && pid == oldPID }
			})
			first := w.clk.Now()
			mark := w.j.len()
			for i := 0; i < 20 && len(filter(w.j.since(mark), tc.self, "acquire")) < Shards; i++ {
				n.step()
				w.clk.Add(testTick)
			}
			acq := filter(w.j.since(mark), tc.self, "acquire")
			distinctShards(t, acq, "the restarted node's takeovers")
			if len(acq) != Shards {
				t.Fatalf("took %d shards, want all %d", len(acq), Shards)
			}
			want := first
			if tc.wantWait {
				want = first.Add(testLease + testMargin)
			}
			for _, e := range acq {
				if e.grant.Epoch != 2 || !e.grant.NotBefore.Equal(want) {
					t.Fatalf("shard %d: epoch %d NotBefore %v, want epoch 2 and %v (lease wait %v)",
						e.shard, e.grant.Epoch, e.grant.NotBefore, want, tc.wantWait)
				}
			}
			if tc.self == addrA && tc.host == host && len(asked) == 0 {
				t.Fatal("the old pid was never checked")
			}
			if (tc.self != addrA || tc.host != host) && len(asked) != 0 {
				t.Fatalf("checked pids %v without the same address and host", asked)
			}
			checkAssignment(t, w, n)
			checkEpochs(t, w)
		})
	}
}

// processGone is true only for a pid that no longer exists: this process
// exists, a child that was waited for (reaped) does not.
func TestProcessGone(t *testing.T) {
	if processHost() == "" {
		t.Skip("no /proc boot id or pid namespace here")
	}
	if h1, h2 := processHost(), processHost(); h1 != h2 {
		t.Fatal("processHost is not stable")
	}
	if processGone(os.Getpid()) {
		t.Fatal("this process counted as gone")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	if !processGone(cmd.Process.Pid) {
		t.Fatalf("reaped child %d not counted as gone", cmd.Process.Pid)
	}
	if processGone(0) || processGone(-1) {
		t.Fatal("pid 0 or -1 counted as gone")
	}
}
