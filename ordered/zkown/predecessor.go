package zkown

import (
	"errors"
	"os"
	"strings"
	"syscall"
)

// A restarted node's predecessor.
//
// A node restarted at the same address finds its previous process's id
// still owning its shards: nodes/<old id> outlives a SIGKILL until that
// ZooKeeper session times out, and like any silent owner it counts as
// stale only a lease after this node first saw it. The restarted node,
// which first saw it only once it had started, would so wait a lease
// longer after the kill than another node would have.
//
// It takes the old id's shards at once when it can prove that process is
// dead, not merely silent: the record was written for the same address, in
// the same kernel boot (boot_id) and the same pid namespace as this
// process (Host), by a pid that no longer exists there (kill(pid, 0)
// fails with ESRCH; pids of one namespace are not reused while their
// process, zombie included, exists). A dead process answers nothing more,
// so the lease wait, which only keeps a live old owner's answers before
// the new owner's, protects nothing. A renewal of it still in flight
// changes its znode's version: the takeover, which checks that version,
// fails and the next round decides again.
//
// Anything short of the proof gets the full wait: another host or
// container (another boot or pid namespace: a restarted container gets a
// new one), a pid in use again (a zombie not yet reaped, a reused pid), a
// record of an older version without Host, or /proc unreadable. The proof
// is used for this node's own address only: nodes on other hosts cannot
// make it, and several nodes on one host is a test bed, whose takeover
// times must stay those of a real cluster.

// processHost identifies the process space this process runs in: the
// kernel boot and the pid namespace; "" when they cannot be read (no
// proof then).
func processHost() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	b := strings.TrimSpace(string(boot))
	if b == "" || ns == "" {
		return ""
	}
	return b + "/" + ns
}

// processGone reports whether no process pid exists in this process's pid
// namespace. Only ESRCH proves it: EPERM means one exists.
func processGone(pid int) bool {
	if pid <= 0 {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// predecessorDead reports whether p is proven to be an earlier process of
// this node that is dead (see above).
func (c *Coordinator) predecessorDead(p *peer) bool {
	if p.dead {
		return true
	}
	if !p.present || p.addr != c.cfg.Self || c.cfg.host == "" || p.host != c.cfg.host || p.pid == c.pid || c.cfg.UnsafeNoLeaseWait {
		return false
	}
	p.dead = c.cfg.processGone(p.pid)
	return p.dead
}
