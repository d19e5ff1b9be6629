//go:build !faultinject

package mysqlstore

// faultAfterFence does nothing: normal builds never stall a persist (see
// fault_faultinject.go).
func faultAfterFence(*Store, int) {}

// faultStalls is false: normal builds never stall a persist.
func faultStalls(int) bool { return false }
