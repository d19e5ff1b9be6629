package main

import (
	"os"

	"github.com/idgen/idgen/internal/idctlenv"
	"github.com/idgen/idgen/worker"
)

// addZKFlags adds the flags of a command that reads a cluster in
// ZooKeeper, named as idgen names its settings: --zk, --cluster,
// --zk-root and the digest credential
// --zk-auth-file / --zk-auth, each defaulting from the node's variable.
func addZKFlags(fs *cmdFlags) (servers, cluster, root *string, auth *secretFlags) {
	servers = fs.String("zk", os.Getenv(idctlenv.ZK), "ZooKeeper servers, `host:port,...` (env "+idctlenv.ZK+")")
	cluster, root = addClusterFlags(fs, "")
	return servers, cluster, root, addZKAuthFlags(fs)
}

// addClusterFlags adds --cluster and --zk-root; when ends their help
// ("with --zk: ").
func addClusterFlags(fs *cmdFlags, when string) (cluster, root *string) {
	cluster = fs.String("cluster", envOr(idctlenv.Cluster, worker.DefaultCluster), when+"cluster `name` (env "+idctlenv.Cluster+")")
	root = fs.String("zk-root", envOr(idctlenv.ZKRoot, worker.DefaultRoot), when+"ZooKeeper `root` of the idgen clusters (env "+idctlenv.ZKRoot+")")
	return cluster, root
}

// addZKAuthFlags adds --zk-auth and --zk-auth-file: the digest credential
// of an ACL-protected cluster, as the nodes have it.
func addZKAuthFlags(fs *cmdFlags) *secretFlags {
	return fs.secret("zk-auth", idctlenv.ZKAuth, "ZooKeeper digest credential `user:password` of an ACL-protected cluster", preferFile("zk-auth"))
}
