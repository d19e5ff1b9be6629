//go:build !faultinject

package zkown

// faultInjectBuild: this binary has no faultinject hooks.
const faultInjectBuild = false

// faultNoRestoreRule is false in normal builds (see fault_faultinject.go).
func faultNoRestoreRule() bool { return false }

func faultLeaseMonotonicOnly() bool { return false }

func faultIgnoreStoreLease() bool { return false }
