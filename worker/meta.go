package worker

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/clock"
)

// ensureMeta creates the cluster's meta znode with want (CreatedMs = now)
// if it does not exist, and otherwise compares want with the stored
// settings. It returns the cluster's settings as stored in ZooKeeper.
//
// The settings decide how IDs are laid out, so a node that disagrees with
// the cluster must not issue any: a difference is ErrMetaMismatch naming
// the setting and both values.
//
// want.CreatedMs, when set, is kept (a node re-creating the meta after
// ZooKeeper lost its state keeps the cluster's original creation time);
// zero means now. ctimeMs is ZooKeeper's creation time of the meta znode.
func ensureMeta(c ZK, l layout, want Meta, clk clock.Clock, acl []zk.ACL) (m Meta, ctimeMs int64, err error) {
	if want.CreatedMs == 0 {
		want.CreatedMs = clock.Millis(clk)
	}
	for attempt := 0; attempt < 3; attempt++ {
		_, err := c.Create(l.meta(), toJSON(newMetaData(want)), 0, acl)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) && !isConnErr(err) {
			return Meta{}, 0, fmt.Errorf("create cluster meta %s: %w", l.meta(), err)
		}
		// Read what is stored (ours, or the cluster's).
		b, st, gerr := c.Get(l.meta())
		if errors.Is(gerr, zk.ErrNoNode) || isConnErr(gerr) {
			continue
		}
		if gerr != nil {
			return Meta{}, 0, fmt.Errorf("read cluster meta %s: %w", l.meta(), gerr)
		}
		var got metaData
		if err := json.Unmarshal(b, &got); err != nil {
			return Meta{}, 0, fmt.Errorf("cluster meta %s is not valid JSON (%q): %w", l.meta(), truncate(b), err)
		}
		if err := compareMeta(got.Meta, want, "ZooKeeper"); err != nil {
			return Meta{}, 0, fmt.Errorf("%w (%s)", err, l.meta())
		}
		return got.Meta, st.Ctime, nil
	}
	return Meta{}, 0, fmt.Errorf("create or read cluster meta %s: connection kept failing", l.meta())
}

// compareMeta returns ErrMetaMismatch naming the first setting of have
// (stored at where, e.g. "ZooKeeper" or a file) that differs from want
// (this node's configuration). CreatedMs is not compared: it is the
// cluster's, not the node's.
func compareMeta(have, want Meta, where string) error {
	diff := func(name string, h, w int64) error {
		return fmt.Errorf("%w: %s is %d in %s but %d in this node's configuration; refusing to start",
			ErrMetaMismatch, name, h, where, w)
	}
	switch {
	case have.EpochMs != want.EpochMs:
		return fmt.Errorf("%w: epoch_ms is %d (%s) in %s but %d (%s) in this node's configuration; refusing to start",
			ErrMetaMismatch, have.EpochMs, rfc3339(have.EpochMs), where, want.EpochMs, rfc3339(want.EpochMs))
	case have.IDCBits != want.IDCBits:
		return diff("idc_bits", int64(have.IDCBits), int64(want.IDCBits))
	case have.NodeBits != want.NodeBits:
		return diff("node_bits", int64(have.NodeBits), int64(want.NodeBits))
	}
	return nil
}
