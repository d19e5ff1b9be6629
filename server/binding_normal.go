//go:build !faultinject

package server

// faultNoClusterBinding is false: normal builds always check that the
// database belongs to the node's cluster (see binding_faultinject.go).
func faultNoClusterBinding() bool { return false }
