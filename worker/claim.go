package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"
)

// slotData is the JSON of a slots/<node> claim: who holds it.
type slotData struct {
	Host      string `json:"host"`
	Port      int    `json:"port"`
	PID       int    `json:"pid"`
	Session   string `json:"session"`
	ClaimedAt string `json:"claimed_at"`
}

// claimer claims worker slots of one IDC for one ZooKeeper session.
type claimer struct {
	zk       ZK
	l        layout
	idc      int
	nodeBits int
	acl      []zk.ACL
	data     func() []byte // the slot claim's JSON
	// unreadable is told of a slot whose mark cannot be decoded: it is
	// skipped (issue 17 item 5: picking it again and again would stall
	// every claim of the IDC).
	unreadable func(node int, err error)
}

// errUnreadableMark: a last/<node> znode holds no decodable mark. Such a
// slot cannot be proven safe to take, so it is skipped, logged and
// counted; an operator repairs or deletes the znode.
var errUnreadableMark = errors.New("high-water mark unreadable")

// retryPause is how long a request whose outcome is unknown (connection
// dropped) waits before it is checked or retried.
const retryPause = 100 * time.Millisecond

// tryClaim creates the ephemeral slots/<node> for this session. It
// returns claimed=false and the holder's session id when another session
// holds the slot. A create whose response was lost is recovered by checking
// the znode's owner.
func (c claimer) tryClaim(ctx context.Context, node int) (claimed bool, owner int64, err error) {
	path := c.l.slot(c.idc, node)
	for {
		_, err := c.zk.Create(path, c.data(), zk.FlagEphemeral, c.acl)
		switch {
		case err == nil:
			return true, c.zk.SessionID(), nil
		case errors.Is(err, zk.ErrNodeExists), isConnErr(err):
			ok, st, eerr := c.zk.Exists(path)
			switch {
			case eerr == nil && ok:
				if st.EphemeralOwner == c.zk.SessionID() {
					return true, st.EphemeralOwner, nil
				}
				return false, st.EphemeralOwner, nil
			case eerr == nil:
				// Freed in between, or our create never arrived: try again.
			case !isConnErr(eerr):
				return false, 0, fmt.Errorf("check slot %s: %w", path, eerr)
			}
		default:
			return false, 0, fmt.Errorf("claim slot %s: %w", path, err)
		}
		if err := sleepCtx(ctx, retryPause); err != nil {
			return false, 0, fmt.Errorf("claim slot %s: %w", path, err)
		}
	}
}

// candidate is a free slot and how recently it was used.
type candidate struct {
	node  int
	used  int64 // high-water mark of last/<node> (or its mtime); 0: never used
	order int   // random tie-break among equally old slots
}

// claimLRU claims a free slot, least recently used first (rule 3), so a
// slot freed by a crashed node is not reused at once while older ones are
// free. Slots without a mark count as used up to markless (0 in a cluster
// older than the lead: never-used slots come first), in random order so
// that racing nodes spread out instead of all fighting for slot 0. skip is
// a node not to take (-1: none).
func (c claimer) claimLRU(ctx context.Context, skip int, markless int64) (int, error) {
	size := 1 << c.nodeBits
	held, err := c.held()
	if err != nil {
		return 0, err
	}
	lastNames, _, err := c.zk.Children(c.l.lastDir(c.idc))
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return 0, fmt.Errorf("list %s: %w", c.l.lastDir(c.idc), err)
	}
	used := map[int]int64{}
	bad := map[int]bool{}
	for _, name := range lastNames {
		n, err := strconv.Atoi(name)
		if err != nil || n < 0 || n >= size || held[n] {
			continue
		}
		b, st, err := c.zk.Get(c.l.last(c.idc, n))
		if err != nil {
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			return 0, fmt.Errorf("read %s: %w", c.l.last(c.idc, n), err)
		}
		d, derr := decodeLast(b)
		switch {
		case derr != nil:
			bad[n] = true
			if c.unreadable != nil {
				c.unreadable(n, fmt.Errorf("%w: %s: %v", errUnreadableMark, c.l.last(c.idc, n), derr))
			}
		case d.HighWater > 0:
			used[n] = d.HighWater
		default:
			used[n] = max(st.Mtime, 1)
		}
	}
	cands := make([]candidate, 0, size)
	for n := 0; n < size; n++ {
		if !held[n] && !bad[n] && n != skip {
			u, ok := used[n]
			if !ok {
				u = markless
			}
			cands = append(cands, candidate{node: n, used: u, order: rand.Int()})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].used != cands[j].used {
			return cands[i].used < cands[j].used
		}
		return cands[i].order < cands[j].order
	})
	conflicts := 0
	for _, cand := range cands {
		if held[cand.node] {
			continue
		}
		ok, _, err := c.tryClaim(ctx, cand.node)
		if err != nil {
			return 0, err
		}
		if ok {
			return cand.node, nil
		}
		held[cand.node] = true
		// Many nodes are racing: refresh the view rather than walk into
		// each other's claims one by one.
		if conflicts++; conflicts%16 == 0 {
			if h, err := c.held(); err == nil {
				held = h
			}
		}
	}
	return 0, fmt.Errorf("%w: all %d slots of idc %d are held (%s); stop a node or use another IDC",
		ErrNoFreeSlot, size, c.idc, c.l.slots(c.idc))
}

// held returns the nodes whose slots/<node> exists.
func (c claimer) held() (map[int]bool, error) {
	names, _, err := c.zk.Children(c.l.slots(c.idc))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", c.l.slots(c.idc), err)
	}
	held := make(map[int]bool, len(names))
	for _, name := range names {
		if n, err := strconv.Atoi(name); err == nil {
			held[n] = true
		}
	}
	return held, nil
}

// lastRead is a slot's recorded mark and the znode version it was read at
// (exists false: the slot has no mark).
type lastRead struct {
	lastData
	exists  bool
	version int32
}

// readLast returns the slot's recorded high-water mark, who wrote it and
// the znode's version (zero and exists=false if the slot has no mark).
func (c claimer) readLast(ctx context.Context, node int) (lastRead, error) {
	path := c.l.last(c.idc, node)
	for {
		b, st, err := c.zk.Get(path)
		switch {
		case err == nil:
			d, derr := decodeLast(b)
			if derr != nil {
				// A slot whose mark cannot be read cannot be proven safe.
				return lastRead{}, fmt.Errorf("%w: %s: %v", errUnreadableMark, path, derr)
			}
			return lastRead{lastData: d, exists: true, version: st.Version}, nil
		case errors.Is(err, zk.ErrNoNode):
			return lastRead{}, nil
		case !isConnErr(err):
			return lastRead{}, fmt.Errorf("read %s: %w", path, err)
		}
		if err := sleepCtx(ctx, retryPause); err != nil {
			return lastRead{}, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// release deletes slots/<node> if this session holds it.
func (c claimer) release(node int) error {
	path := c.l.slot(c.idc, node)
	ok, st, err := c.zk.Exists(path)
	if err != nil || !ok {
		return err
	}
	if st.EphemeralOwner != c.zk.SessionID() {
		return nil
	}
	if err := c.zk.Delete(path, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// newToken returns a random identifier of one lease instance.
func newToken() string {
	return strconv.FormatUint(rand.Uint64(), 36)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
