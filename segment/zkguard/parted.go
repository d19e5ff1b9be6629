package zkguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/segment"
)

// Repair is what a node does for the barrier on a new MySQL server.
type Repair struct {
	// Flush raises every ORDERED row this node remembers on the store
	// (and stores its request ids again).
	Flush func(ctx context.Context) error
	// Remembered returns the marks Flush raises. A node that leaves
	// cleanly writes them to ZooKeeper before it removes its member
	// record (nil: nothing is written).
	Remembered func() []segment.OrderedMark
	// Raise raises marks on the store (mysqlstore.Store.RaiseOrdered):
	// the marks of the nodes that left, before this node's gate opens
	// (nil: not raised).
	Raise func(ctx context.Context, marks []segment.OrderedMark) error
}

// Parted records: why they exist.
//
// The barrier raises what its members remember. A node that stopped
// cleanly shortly before a lossy failover took its memory with it: its
// last answers and its hand-off's exact counters were on the old primary
// only, no member remembered them, and the next owner of its keys served
// them again (the simulator's seeds 173, 214 and 215: a SIGTERM, then a
// failover to a replica some hundred milliseconds behind). So a leaving
// node first writes its marks under /<root>/<cluster>/mysql/parted/, and
// every node raises them before its gate opens after a server change.
// The record is written before the member record is removed, and a gate
// opens only after its node read the parted records with no member
// missing, so a node leaving during a barrier is covered too. Records are
// kept for PartedRetention: a failover losing older writes is beyond
// what they protect (as is a node that crashed: it wrote nothing).

// PartedRetention is how long a parted record is raised by later barriers.
const PartedRetention = 10 * time.Minute

// partedChunk bounds the JSON of one parted znode (ZooKeeper's default
// limit is 1 MB per znode).
const partedChunk = 256 << 10

// partedRecord is one znode of a parted node's marks.
type partedRecord struct {
	AtMs  int64      `json:"at_ms"`
	By    string     `json:"by"`
	Marks [][]string `json:"marks"` // [biz, sub_key, last]
}

func (g *Guard) partedDir() string { return path.Join(g.base, "mysql", "parted") }

// writeParted writes marks as parted records of this node stamped now
// (several znodes when large), before leave removes the member record. A
// retry with the same now writes the same znodes.
func (g *Guard) writeParted(ctx context.Context, marks []segment.OrderedMark, now time.Time) error {
	if len(marks) == 0 {
		return nil
	}
	var chunks [][]byte
	rec := partedRecord{AtMs: now.UnixMilli(), By: g.cfg.Self}
	size := 0
	flush := func() {
		b, _ := json.Marshal(rec)
		chunks = append(chunks, b)
		rec.Marks, size = nil, 0
	}
	for _, m := range marks {
		e := []string{m.Biz, m.SubKey, strconv.FormatInt(m.Last, 10)}
		n := len(m.Biz) + len(m.SubKey) + 32
		if size+n > partedChunk && len(rec.Marks) > 0 {
			flush()
		}
		rec.Marks = append(rec.Marks, e)
		size += n
	}
	flush()
	if err := g.call(ctx, func() error { return g.ensure(g.partedDir()) }); err != nil {
		return err
	}
	prefix := fmt.Sprintf("%013d-%s-", now.UnixMilli(), strings.ReplaceAll(g.cfg.Self, "/", "_"))
	for i, b := range chunks {
		err := g.call(ctx, func() error {
			_, err := g.conn.Create(path.Join(g.partedDir(), prefix+strconv.Itoa(i)), b, 0, g.acl)
			if errors.Is(err, zk.ErrNodeExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// raiseParted raises the marks of the parted records younger than
// PartedRetention with raise, and deletes older ones.
func (g *Guard) raiseParted(ctx context.Context, raise func(ctx context.Context, marks []segment.OrderedMark) error) error {
	if raise == nil || faultIgnoreParted() {
		return nil
	}
	var names []string
	err := g.call(ctx, func() error {
		var err error
		names, _, err = g.conn.Children(g.partedDir())
		if errors.Is(err, zk.ErrNoNode) {
			names, err = nil, nil
		}
		return err
	})
	if err != nil || len(names) == 0 {
		return err
	}
	sort.Strings(names)
	cutoff := g.cfg.Now().Add(-PartedRetention).UnixMilli()
	var marks []segment.OrderedMark
	for _, name := range names {
		p := path.Join(g.partedDir(), name)
		if ms, perr := strconv.ParseInt(strings.SplitN(name, "-", 2)[0], 10, 64); perr == nil && ms < cutoff {
			_ = g.call(ctx, func() error { return g.conn.Delete(p, -1) }) // anyone may clean up
			continue
		}
		var data []byte
		err := g.call(ctx, func() error {
			var err error
			data, _, err = g.conn.Get(p)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		var rec partedRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			g.log.Error("parted record is not valid JSON: skipped (its node's marks are protected only by the replication)", zap.String("znode", p), zap.Error(err))
			continue
		}
		for _, e := range rec.Marks {
			if len(e) != 3 {
				continue
			}
			last, err := strconv.ParseInt(e[2], 10, 64)
			if err != nil {
				continue
			}
			marks = append(marks, segment.OrderedMark{Biz: e[0], SubKey: e[1], Last: last})
		}
	}
	if len(marks) == 0 {
		return nil
	}
	if err := raise(ctx, marks); err != nil {
		return fmt.Errorf("raise the ORDERED rows of nodes that left: %w", err)
	}
	g.partedRaised.Add(uint64(len(marks)))
	return nil
}

// leaveParted writes this node's marks for leave, retrying while
// ZooKeeper cannot be reached, for at most one member lease: a node
// stopped during an outage would otherwise leave with its memory (the
// simulator's seed 214: a SIGTERM while the ensemble was down, then a
// lossy failover). Past that, it logs what is unprotected.
func (g *Guard) leaveParted(remembered func() []segment.OrderedMark) {
	marks := remembered()
	now := g.cfg.Now()
	deadline := time.Now().Add(g.cfg.MemberLease)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
		err := g.writeParted(ctx, marks, now)
		cancel()
		if err == nil {
			g.partedWritten.Add(uint64(len(marks)))
			return
		}
		if !time.Now().Before(deadline) {
			g.log.Warn("could not write this node's ORDERED marks for the barriers after it left: keys only it served are protected only by the replication if MySQL fails over in the next minutes",
				zap.Int("marks", len(marks)), zap.Duration("tried_for", g.cfg.MemberLease), zap.Error(err))
			return
		}
		time.Sleep(partedRetry)
	}
}

// partedRetry is the pause between attempts of leaveParted.
const partedRetry = 100 * time.Millisecond
