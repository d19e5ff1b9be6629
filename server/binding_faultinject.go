//go:build faultinject

package server

import "os"

// faultNoClusterBinding is the negative control of the database's cluster
// binding (IDGEN_FAULT_NO_CLUSTER_BINDING=1, neg-two-clusters-one-db): the
// node skips the check that the database belongs to its cluster, as idgen
// did before issue 29 (hole k), so a second cluster's node serves from,
// and takes the ORDERED shards of, the first cluster's database.
func faultNoClusterBinding() bool { return os.Getenv("IDGEN_FAULT_NO_CLUSTER_BINDING") == "1" }
