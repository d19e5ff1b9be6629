package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
)

// peerClockParallel bounds the peers asked at once.
const peerClockParallel = 8

// peer is a running member of the cluster as published in its znode.
type peer struct {
	Host string
	Port int
}

// clusterPeers lists the members of every IDC of the cluster, except the
// node at self (a previous run of this node whose session has not expired
// yet would otherwise be asked about itself).
func clusterPeers(c ZK, l layout, self peer) ([]peer, error) {
	idcs, _, err := c.Children(l.clusterPath())
	if err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		return nil, fmt.Errorf("list %s: %w", l.clusterPath(), err)
	}
	var peers []peer
	for _, name := range idcs {
		n, ok := parseIDC(name)
		if !ok {
			continue
		}
		members, _, err := c.Children(l.members(n))
		if err != nil {
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			return nil, fmt.Errorf("list %s: %w", l.members(n), err)
		}
		for _, m := range members {
			b, _, err := c.Get(l.members(n) + "/" + m)
			if err != nil {
				continue // gone in between
			}
			var d memberData
			if json.Unmarshal(b, &d) != nil || d.Host == "" {
				continue
			}
			p := peer{d.Host, d.Port}
			if p != self {
				peers = append(peers, p)
			}
		}
	}
	return peers, nil
}

// checkPeerClocks is rule 5: the local clock is compared with the median
// of the peers' clocks, each read with ask under a per-peer timeout. A peer
// that fails or is slow is skipped; with no answer at all the check is
// logged as skipped. The median tolerates a minority of wrong clocks, and a
// node whose clock is off by more than maxSkew refuses to start.
func checkPeerClocks(ctx context.Context, peers []peer, ask PeerClockFunc, clk clock.Clock,
	timeout, maxSkew time.Duration, log *zap.Logger) error {
	if ask == nil {
		return nil
	}
	if len(peers) == 0 {
		log.Info("peer clock check skipped: no other member in the cluster")
		return nil
	}
	var (
		mu      sync.Mutex
		offsets []int64 // peer minus local, ms
		wg      sync.WaitGroup
		sem     = make(chan struct{}, peerClockParallel)
	)
	for _, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			t0 := clock.Millis(clk)
			ms, err := ask(pctx, p.Host, p.Port)
			t1 := clock.Millis(clk)
			if err == nil {
				err = pctx.Err() // an answer after the deadline is stale
			}
			if err != nil {
				log.Debug("peer clock: peer skipped", zap.String("host", p.Host), zap.Int("port", p.Port), zap.Error(err))
				return
			}
			mu.Lock()
			offsets = append(offsets, ms-(t0+t1)/2)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(offsets) == 0 {
		log.Warn("peer clock check skipped: no peer answered", zap.Int("members", len(peers)))
		return nil
	}
	sort.Slice(offsets, func(i, j int) bool { return offsets[i] < offsets[j] })
	med := offsets[len(offsets)/2]
	if len(offsets)%2 == 0 {
		med = (offsets[len(offsets)/2-1] + med) / 2
	}
	localOff := time.Duration(-med) * time.Millisecond // local minus peers
	if localOff > maxSkew || -localOff > maxSkew {
		dir := "ahead of"
		if localOff < 0 {
			dir = "behind"
		}
		return fmt.Errorf("%w: the local clock is %v %s the median of %d peers (%d of %d members answered); MaxPeerClockSkew is %v: fix NTP on this host (or the peers) before starting",
			ErrClockSkew, localOff.Abs(), dir, len(offsets), len(offsets), len(peers), maxSkew)
	}
	log.Info("peer clock check passed", zap.Duration("offset", localOff), zap.Int("answered", len(offsets)), zap.Int("members", len(peers)))
	return nil
}
