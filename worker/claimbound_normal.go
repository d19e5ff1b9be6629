//go:build !faultinject

package worker

// faultConvertedClaimBound is false: normal builds take the later of the
// claim bound's two readings (see claimbound_faultinject.go).
func faultConvertedClaimBound() bool { return false }
