package ordered

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// ownerTag tells this process's claims from any other's at the same
// address. The stores accept a claim of the stored epoch again only from
// the owner that made it (a retried claim, or one a lossy MySQL failover
// lost): a restored ZooKeeper can hand one epoch out twice, and the second
// grantee may be a new process at the same address (a restarted pod with
// a stable name) while the first, paused, still answers from memory. Its
// claim must be refused, so the coordinator waits out that owner's lease
// (issue 29, hole b).
func ownerTag() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("pid=%d run=%s", os.Getpid(), hex.EncodeToString(b[:]))
}
