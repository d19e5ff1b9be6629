package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/worker"
)

// The client reads only the member znodes
// (/<root>/<cluster>/idc-<n>/members/m-*: host and port) and watches their
// parents. It does not use worker.WatchWorkers: that listing also reads
// every slot and heartbeat znode and writes the cluster's clock znode on
// each pass (for heartbeat ages), and heartbeats change every few seconds,
// so each client would write to ZooKeeper continuously.

// zkReader is the part of the ZooKeeper client the discovery uses.
type zkReader interface {
	Get(path string) ([]byte, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error)
}

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
	addrs, watches, err := listMembers(conn, clusterPath(c.cfg.ZKRoot, c.cfg.Cluster))
	if err != nil {
		conn.Close()
		return fmt.Errorf("idgen client: %w", err)
	}
	if err := c.setAddrs(addrs); err != nil {
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
// znodes, until Close. A failed listing is retried after a second; the
// last good node list stays in use meanwhile.
func (c *Client) watchMembers(conn zkReader, watches []<-chan zk.Event) {
	path := clusterPath(c.cfg.ZKRoot, c.cfg.Cluster)
	for {
		if !waitAny(c.bg, watches, time.Second) {
			return
		}
		addrs, w, err := listMembers(conn, path)
		watches = w
		if err != nil {
			watches = nil // retry after the pause
			continue
		}
		if len(addrs) == 0 {
			// Every member gone at once is more likely a ZooKeeper hiccup
			// than a dead cluster: keep asking the last known nodes.
			continue
		}
		_ = c.setAddrs(addrs)
	}
}

// waitAny waits until one of the watch channels fires (or, with none, for
// pause) and reports false when ctx ended.
func waitAny(ctx context.Context, watches []<-chan zk.Event, pause time.Duration) bool {
	if len(watches) == 0 {
		t := time.NewTimer(pause)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	fired := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, w := range watches {
		go func() {
			select {
			case <-w:
				select {
				case fired <- struct{}{}:
				default:
				}
			case <-wctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
		return false
	case <-fired:
		return true
	}
}

// listMembers returns the RPC addresses of the cluster's members and the
// watches that fire when the set may have changed.
func listMembers(r zkReader, cluster string) ([]string, []<-chan zk.Event, error) {
	names, _, w, err := r.ChildrenW(cluster)
	if errors.Is(err, zk.ErrNoNode) {
		_, _, ew, eerr := r.ExistsW(cluster)
		if eerr != nil {
			return nil, nil, fmt.Errorf("watch %s: %w", cluster, eerr)
		}
		return nil, []<-chan zk.Event{ew}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", cluster, err)
	}
	watches := []<-chan zk.Event{w}
	var addrs []string
	for _, name := range names {
		if n, ok := strings.CutPrefix(name, "idc-"); !ok || !isNumber(n) {
			continue
		}
		dir := cluster + "/" + name + "/members"
		members, _, mw, err := r.ChildrenW(dir)
		if errors.Is(err, zk.ErrNoNode) {
			_, _, ew, eerr := r.ExistsW(dir)
			if eerr != nil {
				return nil, nil, fmt.Errorf("watch %s: %w", dir, eerr)
			}
			watches = append(watches, ew)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", dir, err)
		}
		watches = append(watches, mw)
		for _, m := range members {
			if !strings.HasPrefix(m, "m-") {
				continue
			}
			b, _, err := r.Get(dir + "/" + m)
			if errors.Is(err, zk.ErrNoNode) {
				continue // left in between
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read %s/%s: %w", dir, m, err)
			}
			var d struct {
				Host string `json:"host"`
				Port int    `json:"port"`
			}
			if json.Unmarshal(b, &d) != nil || d.Host == "" || d.Port <= 0 {
				continue // not a member this client can call
			}
			addrs = append(addrs, net.JoinHostPort(d.Host, strconv.Itoa(d.Port)))
		}
	}
	sort.Strings(addrs)
	return addrs, watches, nil
}

func clusterPath(root, cluster string) string {
	if root == "/" {
		return "/" + cluster
	}
	return strings.TrimSuffix(root, "/") + "/" + cluster
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil && s != ""
}
