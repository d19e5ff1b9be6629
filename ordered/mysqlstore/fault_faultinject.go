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
var persistStall sync.Once

func faultAfterFence(s *Store, shard int) {
	path := os.Getenv("IDGEN_FAULT_ORDERED_PERSIST_STALL")
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) != 2 || f[0] != strconv.Itoa(shard) {
		return
	}
	d, err := time.ParseDuration(f[1])
	if err != nil || d <= 0 {
		return
	}
	persistStall.Do(func() {
		s.conn.Log.Warn("faultinject: persist stalled after the fence", zap.Int("shard", shard), zap.Duration("stall", d))
		time.Sleep(d)
	})
}
