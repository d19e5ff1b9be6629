//go:build !faultinject

package ordered

// faultInjectBuild: this binary has no faultinject hooks.
const faultInjectBuild = false

// The negative controls of hole a, and of request ids kept across a lossy
// failover, are off in normal builds (see fault_faultinject.go).
func faultCachedNoGate() bool            { return false }
func faultRememberAnswered() bool        { return false }
func faultUncleanHandOff() bool          { return false }
func faultForgetRequests() bool          { return false }
func faultLeaseMonotonicOnly() bool      { return false }
func faultForgetLoaded() bool            { return false }
func faultRefuseAfterLoss() bool         { return false }
func faultWriteBackAcrossFailover() bool { return false }
