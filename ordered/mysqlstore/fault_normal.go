//go:build !faultinject

package mysqlstore

// faultAfterFence does nothing: normal builds never stall a persist (see
// fault_faultinject.go).
func faultAfterFence(*Store, int) {}
