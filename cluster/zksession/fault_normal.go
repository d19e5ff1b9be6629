//go:build !faultinject

package zksession

// faultAnyServerBelow is false: normal builds need every answering serving
// server below the client's zxid (see fault_faultinject.go).
func faultAnyServerBelow() bool { return false }
