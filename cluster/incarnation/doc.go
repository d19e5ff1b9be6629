// Package incarnation is the cluster's one check that ZooKeeper lost
// state: wiped, or restored from an older copy (one server or an
// ensemble), whichever node writes first (issue 29, hole h). The shared
// ZooKeeper session (cluster/zksession) runs Checker.Check at every
// connect and reconnect before it reports the session usable, so every
// guard (worker slots, ORDERED owners and epochs, the replication barrier,
// the segment ledger) learns a loss from the same verdict, before any of
// them writes.
//
// Until now restores were detected by zxids: a client that saw a newer
// zxid than a restored server has is refused. A new node that starts
// first after a single server was restored writes, which pushes the
// server's zxid past the old clients'; nothing is refused and the restore
// goes unseen (72 and 410 duplicate snowflake pairs in two real runs).
// Zxids cannot tell either way: a restart moves the epoch, their high 32
// bits, forward whether the data went back or not.
//
// # What is stored
//
//	/<root>/<cluster>/incarnation      {"id", "created_ms", "counter", "restores", ...}
//	/<root>/<cluster>/lineage/<node>   {"version", "token", "written_ms"}
//	properties file                    incarnation.id, .node, .lineage, .pending, .counter, .restores
//	cluster_binding (MySQL, schema 10) zk_incarnation, zk_counter
//
// The marker is written by `idctl cluster init` with a random ID. Each
// node records the ID, the name of its lineage znode, the lineage it last
// wrote, the marker counter it last wrote and the marker's loss count.
//
// # The check, and why each verdict is sound
//
//  1. Read the witness (the database), then bump the marker's counter
//     with a write conditional on the version read (retried on conflict).
//     The write goes through the leader, so every read after it in the
//     session sees at least the leader's state at that time: a lagging
//     follower cannot make the reads below look like lost writes (where
//     the client supports it, Sync is called first as well).
//  2. Marker ID differs from the recorded one (this node's or the
//     database's): the cluster was re-created (total loss, then `idctl
//     cluster init` again). Refused for good (ErrRecreated); the node's
//     slots, marks and epochs belong to the old cluster.
//  3. Witness: every counter the database holds was written to ZooKeeper
//     before it was raised there, and the witness is read before the bump,
//     so in a ZooKeeper that lost nothing the bump lands above it. A bump
//     at or below it means ZooKeeper lost bumps. This is what a new node
//     with no record of its own relies on.
//  4. Counter below the one this node wrote, or a loss count below the
//     one it saw: ZooKeeper went back.
//  5. Lineage: only this node writes its lineage znode, each time with a
//     higher version and a fresh random token, recorded two-phase: the
//     pending lineage is saved (fsync) before the znode write and
//     confirmed after it. ZooKeeper then holds the confirmed or the
//     pending lineage unless it lost the write; a missing znode, an older
//     version, or the same version with another token means it lost
//     this node's writes. A crash between the writes leaves the pending
//     one in ZooKeeper or nothing new: both pass. A lineage ahead of the
//     record (a properties file restored from a backup) is logged, not a
//     loss of ZooKeeper's state.
//  6. A loss count above the one this node saw: another node detected a
//     loss since this node last looked; reported, not counted again, and
//     only to a process that passed a check before (one that starts
//     holds nothing in memory from before the loss, and the detector
//     already marked the cluster).
//
// A detected loss is recorded in the marker (loss count, a counter above
// the witness's so the same loss is not seen twice) and, by default, in
// the cluster's meta (cluster.MarkRestored): every slot taken in the next
// lead, by any node, waits past the marks ZooKeeper lost. That is the
// restore rule; Check also returns the verdict so each guard can apply its
// own part (the session counts it in View.Restores).
//
// A missing marker with a recorded ID (this node's or the database's):
// ZooKeeper was wiped or restored from a copy older than the marker; the
// marker is re-created with that ID and the loss reported. A missing
// marker with the cluster's meta present and no ID recorded anywhere: a
// cluster created by an older idgen (upgrade); a marker is created, no
// loss reported. Nothing at all: no such cluster (ErrNoCluster, refused).
//
// # Writes within a session: Touch
//
// The check runs at (re)connects. A restore from a copy taken after a
// node's last (re)connect loses only what that node wrote since, within
// its session (a slot claim, marks written ahead): the lineages and
// counters in the copy are current, and a new node that starts first
// cannot tell. Checker.Touch closes that for a write a guard makes it
// cover: it bumps the counter and raises the witness, so a later restore
// from a copy taken before it leaves ZooKeeper's counter at or below the
// witness's. Slot claims must call it: a slot claimed for the first time
// after the copy has no mark in the copy, so a new node could take it at
// once while the claimer still serves from it. Marks written ahead
// matter as much when the old holder's session expires in the restored
// server before it reconnects; touching at every mark write (or every
// heartbeat) bounds the unseen window to the touch interval. The server
// touches every heartbeat while its session is usable (server/incarnation.go);
// the real-server scenario zk-restore-fresh-first (copy taken 16 s into
// the nodes' sessions) repeats IDs without it and passes with it.
//
// Without a witness (no --mysql), a new node that starts first cannot
// tell a restored ZooKeeper from a healthy one: it has nothing to compare
// with. The nodes that ran before detect it at their next (re)connect.
package incarnation
