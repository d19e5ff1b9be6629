//go:build faultinject

package mysqlstore

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Fault-injection hooks of the fault suite (./build.sh faults). Only builds
// with the faultinject tag contain this file.

// persistStall (IDGEN_FAULT_ORDERED_PERSIST_STALL=<file>) stalls one
// ORDERED persist of the process after its fence UPDATE, inside the open
// transaction, once the file exists and holds "<shard> <duration>": the
// fault suite writes it when it knows the hot shard and SIGSTOPs the node
// in the stall (ordered-fence-row-pause, neg-fence-row-pause).
//
// "<shard> <duration> every" stalls every persist of the shard for
// duration while the file says so (the node keeps running, only the first
// stall is logged): the shard has a persist in flight, holding its fence
// row, at almost any moment, however the suite's fault and the node's
// reaction to it fall in time (ordered-answer-after-loss: the shard lost
// when the node's expired ZooKeeper session is noticed).
var persistStall sync.Once

func faultAfterFence(s *Store, shard int) {
	d, every := stallFor(shard)
	if d <= 0 {
		return
	}
	first := false
	persistStall.Do(func() {
		first = true
		s.conn.Log.Warn("faultinject: persist stalled after the fence", zap.Int("shard", shard), zap.Duration("stall", d), zap.Bool("every", every))
		time.Sleep(d)
	})
	if every && !first {
		time.Sleep(d)
	}
}

// faultStalls: a persist of shard would stall (so its transaction keeps
// its COMMIT out of the joined statements, for the stall to run before it).
func faultStalls(shard int) bool {
	d, _ := stallFor(shard)
	return d > 0
}

// stallFor is the stall IDGEN_FAULT_ORDERED_PERSIST_STALL asks of shard
// (0: none) and whether it asks it of every persist.
func stallFor(shard int) (time.Duration, bool) {
	path := os.Getenv("IDGEN_FAULT_ORDERED_PERSIST_STALL")
	if path == "" {
		return 0, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 || len(f) > 3 || f[0] != strconv.Itoa(shard) || (len(f) == 3 && f[2] != "every") {
		return 0, false
	}
	d, err := time.ParseDuration(f[1])
	if err != nil || d <= 0 {
		return 0, false
	}
	return d, len(f) == 3
}
