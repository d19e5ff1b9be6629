//go:build !faultinject

package worker

// faultNoRegistryFence is false: normal builds always refuse a slot in
// ZooKeeper when the cluster's record names another registry (see
// registryfence_faultinject.go).
func faultNoRegistryFence() bool { return false }
