package worker

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

	"github.com/idgen/idgen/cluster"
)

// This file is the one reader of the member znodes
// (/<root>/<cluster>/idc-<n>/members/m-<guid>-<seq>) for callers of a
// cluster: the Go client (package client) and the Kitex resolver (package
// resolver) both list and watch the members through it, so they agree on
// which znodes count and when.
//
// It reads the member znodes only, and watches their parents. It does not
// use WatchWorkers: that listing also reads every slot and heartbeat znode
// and writes the cluster's clock znode on each pass (for heartbeat ages),
// and heartbeats change every few seconds, so every caller would write to
// ZooKeeper continuously.

// Member is one running node as its member znode shows it.
type Member struct {
	IDC int
	// Name is the member znode's name (m-<guid>-<seq>).
	Name      string
	Host      string
	Port      int
	PID       int
	Version   string
	StartedAt time.Time
	Slot      int    // the node number the member holds
	Worker    int    // its snowflake worker ID
	Session   string // its ZooKeeper session id, hex
}

// Addr is the member's RPC address, host:port.
func (m Member) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// MemberReader is the part of a ZooKeeper client ListMembers uses;
// *zk.Conn implements it.
type MemberReader interface {
	Get(path string) ([]byte, *zk.Stat, error)
	ChildrenW(path string) ([]string, *zk.Stat, <-chan zk.Event, error)
	ExistsW(path string) (bool, *zk.Stat, <-chan zk.Event, error)
}

var _ MemberReader = (*zk.Conn)(nil)

// MemberRetryPause is how long WatchMembers waits before listing again
// after a listing failed (ZooKeeper unreachable, a read refused).
const MemberRetryPause = time.Second

// ListMembers returns the members of the cluster /<root>/<cluster>, sorted
// by address then name, and the watches that fire when the set may have
// changed: one on the cluster znode's children (a new IDC), one on each
// IDC's members directory (a member joins or its znode goes), or an
// existence watch where the znode does not exist yet. A cluster that does
// not exist has no members and no error.
//
// A member znode whose data has no host and port (not a member a caller
// can reach) is skipped, as is one that goes while it is read.
func ListMembers(r MemberReader, root, clusterName string) ([]Member, []<-chan zk.Event, error) {
	if root != "/" {
		root = strings.TrimSuffix(root, "/")
	}
	base := cluster.Path(root, clusterName)
	names, w, exists, err := childrenW(r, base)
	if err != nil {
		return nil, nil, err
	}
	if !exists {
		return nil, []<-chan zk.Event{w}, nil
	}
	watches := []<-chan zk.Event{w}
	var out []Member
	for _, name := range names {
		idc, ok := parseIDC(name)
		if !ok {
			continue
		}
		dir := base + "/" + name + "/members"
		kids, mw, exists, err := childrenW(r, dir)
		if err != nil {
			return nil, nil, err
		}
		watches = append(watches, mw)
		if !exists {
			continue
		}
		for _, k := range kids {
			if !strings.HasPrefix(k, memberPrefix) {
				continue
			}
			b, _, err := r.Get(dir + "/" + k)
			if errors.Is(err, zk.ErrNoNode) {
				continue // left in between
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read %s/%s: %w", dir, k, err)
			}
			var d memberData
			if json.Unmarshal(b, &d) != nil || d.Host == "" || d.Port <= 0 || d.Port > 65535 {
				continue // not a member a caller can reach
			}
			m := Member{IDC: idc, Name: k, Host: d.Host, Port: d.Port, PID: d.PID, Version: d.Version,
				Slot: d.Slot, Worker: d.Worker, Session: d.Session}
			if d.StartedAtMs > 0 {
				m.StartedAt = time.UnixMilli(d.StartedAtMs).UTC()
			} else if t, err := time.Parse(time.RFC3339, d.StartedAt); err == nil {
				m.StartedAt = t
			}
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].Addr(), out[j].Addr(); a != b {
			return a < b
		}
		return out[i].Name < out[j].Name
	})
	return out, watches, nil
}

// childrenW lists dir's children with a watch on them, or, when dir does
// not exist, returns an existence watch (exists false), which fires when
// it is created. A dir created between the two reads is listed again:
// the existence watch of a znode that exists fires on a change of its
// data or its deletion, never on a new child, so returning it would miss
// every member that joins after (a resolver started while its cluster's
// first node registered saw no member for good).
func childrenW(r MemberReader, dir string) (kids []string, w <-chan zk.Event, exists bool, err error) {
	for range 3 {
		kids, _, w, err := r.ChildrenW(dir)
		if err == nil {
			return kids, w, true, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, nil, false, fmt.Errorf("list %s: %w", dir, err)
		}
		ok, _, ew, err := r.ExistsW(dir)
		if err != nil {
			return nil, nil, false, fmt.Errorf("watch %s: %w", dir, err)
		}
		if !ok {
			return nil, ew, false, nil
		}
	}
	// Created and deleted over and over while listed: the caller lists
	// again after its pause (WatchMembers).
	return nil, nil, false, fmt.Errorf("list %s: %w (it kept appearing and going while listed)", dir, zk.ErrNoNode)
}

// WatchMembers waits until one of watches fires (watches as ListMembers
// returned them; none: MemberRetryPause), lists the members again and
// calls fn with the result, over and over until ctx ends. fn's error
// argument reports a failed listing (the members argument is then nil and
// the next listing comes after MemberRetryPause); what to keep meanwhile
// is fn's choice. An empty list with no error means that ZooKeeper shows
// no member.
//
// A lost connection does not fire the watches (the client re-arms them
// when it reconnects); a session expiry or Close of the connection does,
// and the listing then fails until a new session exists.
func WatchMembers(ctx context.Context, r MemberReader, root, clusterName string, watches []<-chan zk.Event,
	fn func([]Member, error)) {
	for {
		if !waitMemberWatches(ctx, watches, MemberRetryPause) {
			return
		}
		ms, w, err := ListMembers(r, root, clusterName)
		if ctx.Err() != nil {
			return
		}
		watches = w
		if err != nil {
			watches = nil // retry after the pause
		}
		fn(ms, err)
	}
}

// waitMemberWatches waits until one of the watch channels fires (or, with
// none, for pause) and reports false when ctx ended.
func waitMemberWatches(ctx context.Context, watches []<-chan zk.Event, pause time.Duration) bool {
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
