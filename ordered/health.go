package ordered

import "github.com/idgen/idgen/segment"

// Serves reports whether this node answers for the shard now: it holds a
// term of the shard, the term's lease wait is over and the node's lease
// runs.
func (a *Allocator) Serves(shard int) bool {
	if shard < 0 || shard >= segment.OrderedShards {
		return false
	}
	sh := a.shards[shard].Load()
	if sh == nil {
		return false
	}
	now := a.cfg.Clock.Now()
	return !now.Before(sh.grant.NotBefore) && now.Before(a.cfg.Coordinator.ValidUntil()) &&
		WallBefore(a.wallAt(now), a.cfg.Coordinator.ValidUntilWall())
}

// Unserved returns the shards that have no serving owner as far as this
// node can tell from owners (a Coordinator's view, indexed by shard) and
// serves (Allocator.Serves): shards with no owner, and shards owned at
// self's address that this node does not serve (a lease wait, a fenced
// term not yet given up, a claim that keeps failing). A shard owned by
// another node is that node's to report.
func Unserved(owners []Owner, self string, serves func(shard int) bool) []int {
	var out []int
	for s := range segment.OrderedShards {
		if s >= len(owners) {
			out = append(out, s)
			continue
		}
		o := owners[s]
		switch {
		case o.Addr == "":
			out = append(out, s)
		case (o.Self || o.Addr == self) && !serves(s):
			out = append(out, s)
		}
	}
	return out
}
