// Package zksession is the node's one ZooKeeper session: one client at a
// time, one reconnect and redial policy, one place that decides "the
// session is gone" and "ZooKeeper lost writes", shared by every guard (the
// worker lease, the ORDERED shard owners, the replication guard and
// ledger, the ZooKeeper business store).
//
// # Why one session per node
//
// The server opens one Session (Start or Open) and hands it to every
// guard; a guard never closes it. Tests and idctl may open their own.
//
//   - One session is one membership lifetime. Every ephemeral znode the
//     node holds (worker slot claim, member znode, shard leases, barrier
//     acknowledgements) lives and dies with the same session, so the
//     guards can never disagree about whether the node is still a member:
//     when the session expires, all of them lose their claims at the same
//     instant, and a guard that sees View.ID change knows every other
//     guard sees it too.
//   - One place decides. Before this package, four guards dialled
//     ZooKeeper with four recovery policies (one had none and refused its
//     handshakes forever after a wipe, issue 29 holes e and l). A policy
//     fixed once is fixed for every guard: the rules below, the
//     incarnation check (Config.Check) and the lost-writes rule.
//   - One client is one TCP connection and one heartbeat per node instead
//     of four, and one zxid history for the lost-writes rule.
//
// The cost is shared fate: a guard that blocks the client (a huge
// request) delays the others. Guards keep their requests small.
//
// # What Session does
//
// It reads the client's event channel in one goroutine that never blocks
// (the go-zookeeper client drops events nobody reads), keeps a View, and
// wakes consumers on every change (Changed). A session exists only at
// zk.StateHasSession; a TCP connection (StateConnected) is not one.
//
// After every (re)connect, a new session, a new client or the same
// session back after a disconnect, it adds the digest credential (on a new
// client) and runs Config.Check, the cluster incarnation check, before it
// reports the session usable (View.Has). A wipe or restore found by the
// check is counted in View.Restores; a permanent refusal (ErrRefused)
// stays in View.Refused.
//
// # When the client is replaced
//
// A ZooKeeper ensemble that lost its state (restarted on an empty data
// dir, or restored from an older copy) refuses the handshake of every
// client that has seen a newer zxid than its own: the server closes the
// connection, the go-zookeeper client reconnects offering the same zxid,
// forever ("authentication failed: EOF" every second). Only a new client,
// which offers no zxid, gets a session again.
//
// But an ensemble electing a leader, or a server still syncing, closes
// handshakes in the same way, and there the session is alive: a new client
// would abandon it (closing a client without a session tells the server
// nothing), and every ephemeral znode of the node would stay claimed by a
// dead session for a session timeout. So the Session asks the servers
// (the srvr four-letter word, ServerStats) and replaces its client only
// when the session is really gone:
//
//   - lost writes: every serving server that answers is below the highest
//     zxid this client saw, on two probes at least LostWritesConfirm
//     apart. One lagging follower is not enough (issue 29 hole g): a
//     follower that serves catches up with its leader within
//     milliseconds, and the other servers, above the zxid, are the
//     ensemble's truth; a server that lost writes stays below for good;
//   - servers have served for longer than a session timeout without
//     giving the client its session back: a serving ensemble has expired
//     it;
//   - no server answers srvr (not in 4lw.commands.whitelist, or down) and
//     the refusals have lasted longer than Config.Lead.
//
// An election within the outage tolerance costs nothing: the client gets
// its session back and the guards never stopped.
//
// The zxid rules decide only that this client will not get its session
// back. Whether the cluster was wiped or restored is the incarnation
// check's verdict when Config.Check is set; without a check (tests, or
// before the cluster has an incarnation) the lost-writes verdict counts as
// a restore, as the worker lease did before this package.
package zksession
