package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/worker"
)

// The client reads only the member znodes
// (/<root>/<cluster>/idc-<n>/members/m-*: host and port) and watches their
// parents, through worker.ListMembers and worker.WatchMembers: the same
// reader the Kitex resolver (package resolver) uses, so both see the same
// members.
//
// Rules, shared with package resolver:
//   - New fails when ZooKeeper gives no session within ZKSessionTimeout;
//     a cluster that does not exist (yet) or has no member is no error,
//     calls then fail until members appear;
//   - while a listing fails (ZooKeeper unreachable, the session expired
//     and no new one yet) the last good list stays in use, and the listing
//     is retried every second;
//   - a listing that shows no member at all keeps the last known nodes:
//     every member gone at once is more likely a ZooKeeper hiccup (a
//     wiped or restored ensemble) than a dead cluster, and asking the last
//     known nodes costs no more than having none.

// startZK connects, lists the members once (so New returns with nodes)
// and watches them in the background.
func (c *Client) startZK() error {
	ctx, cancel := context.WithTimeout(c.bg, c.cfg.ZKSessionTimeout)
	defer cancel()
	conn, err := worker.DialZK(ctx, c.cfg.ZK, c.cfg.ZKSessionTimeout, c.cfg.ZKAuth, nil)
	if err != nil {
		return fmt.Errorf("idgen client: ZooKeeper %s: %w", strings.Join(c.cfg.ZK, ","), err)
	}
	c.zk = conn
	ms, watches, err := worker.ListMembers(conn, c.cfg.ZKRoot, c.cfg.Cluster)
	if err != nil {
		conn.Close()
		if errors.Is(err, zk.ErrNoAuth) {
			return fmt.Errorf("idgen client: %w (the cluster's znodes are ACL-protected: set Config.ZKAuthFile, or ZKAuth, to the digest credential user:password the nodes use)", err)
		}
		return fmt.Errorf("idgen client: %w", err)
	}
	if err := c.setAddrs(memberAddrs(ms)); err != nil {
		conn.Close()
		return err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.watchMembers(conn, watches)
	}()
	return nil
}

// watchMembers re-lists the members after every change of the watched
// znodes, until Close, keeping the last good node list while a listing
// fails or shows nobody (see the rules above).
func (c *Client) watchMembers(conn worker.MemberReader, watches []<-chan zk.Event) {
	worker.WatchMembers(c.bg, conn, c.cfg.ZKRoot, c.cfg.Cluster, watches, func(ms []worker.Member, err error) {
		if err != nil || len(ms) == 0 {
			return
		}
		_ = c.setAddrs(memberAddrs(ms))
	})
}

// memberAddrs returns the members' RPC addresses (setAddrs drops
// duplicates: a restarted node may be listed twice until its old session
// ends).
func memberAddrs(ms []worker.Member) []string {
	addrs := make([]string, len(ms))
	for i, m := range ms {
		addrs[i] = m.Addr()
	}
	return addrs
}
