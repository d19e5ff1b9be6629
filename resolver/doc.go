// Package resolver is a Kitex discovery.Resolver over the member znodes
// of an idgen cluster (/<root>/<cluster>/idc-<n>/members/m-<seq>, one per
// running node: host, port, IDC, slot, version), so that a plain Kitex
// client of the idgen service finds the nodes without the idgen client
// package:
//
//	r, err := resolver.New(resolver.Config{ZK: []string{"zk1:2181", "zk2:2181", "zk3:2181"}, Cluster: "prod",
//		ZKAuthFile: "/etc/idgen/zk.auth"}) // an ACL-protected cluster's user:password
//	if err != nil { ... }
//	defer r.Close()
//	cli, err := idgenservice.NewClient("idgen",
//		client.WithResolver(r),
//		client.WithLoadBalancer(loadbalance.NewWeightedBalancer(), r.CacheOptions()),
//		client.WithTransportProtocol(transport.TTHeaderFramed))
//	resp, err := cli.NextIDs(ctx, &idl.NextIDsRequest{Biz: "order", Count: 10,
//		Token: &token}) // the nodes' client token, when they require one
//
// The package's Example is this, compiled.
//
// The resolver reads the members through worker.ListMembers and watches
// them (worker.WatchMembers), the same code and rules as the idgen Go
// client (package client), so Resolve answers from memory: no ZooKeeper
// round trip per Kitex refresh. Instances are "tcp" host:port with
// Config.Weight and the tags TagCluster, TagIDC, TagSlot, TagWorker,
// TagVersion and TagMember.
//
// # When a node leaves
//
// A node that stops deletes its member znode; one that crashes or is cut
// off from ZooKeeper loses it when ZooKeeper expires its session, at most
// the node's session timeout (--zk-session-timeout, default 10s) after it
// was last heard. The resolver's watch fires at once and the next Resolve
// no longer lists the node.
//
// A Kitex client does not call Resolve per request: it caches the result
// per target in a balancer (pkg/loadbalance/lbcache) and calls Resolve
// again every lbcache.Options.RefreshInterval (Kitex's default is 5s when
// client.WithLoadBalancer gives no options). So a leave reaches the
// balancer at most RefreshInterval after the znode went.
// Resolver.CacheOptions returns options with Config.RefreshInterval
// (default 1s, required below the session timeout), which is what
// client.WithLoadBalancer(lb, r.CacheOptions()) sets: a crashed node is
// out of rotation within its session timeout plus RefreshInterval, a
// stopped one within RefreshInterval. Until then a call to a crashed node
// fails to connect; add a Kitex retry policy
// (client.WithFailureRetry(retry.NewFailurePolicy())) for those, which is
// safe on NextIDs: a lost reply only leaves a gap, and an ORDERED request
// with a request_id is answered the same on a retry.
//
// # When ZooKeeper is unreachable
//
// Like the idgen client, the resolver then keeps answering with the last
// members it saw: the nodes keep serving (up to their marks, or with a
// retryable refusal), and an empty list would only turn a ZooKeeper
// outage into an outage of every caller. Listings are retried every
// second; when the session has expired meanwhile, the client gets a new
// one and lists afresh. Stale reports, and the log says, when the
// resolver has had no session or no working listing for longer than its
// ZKSessionTimeout: the members may then have changed unseen. A listing
// that shows no member at all also keeps the last known ones (every member
// gone at once is more likely a wiped or restored ensemble than a dead
// cluster). A resolver that has never seen a member fails Resolve with
// ErrNoMembers instead of answering with an empty list.
package resolver
