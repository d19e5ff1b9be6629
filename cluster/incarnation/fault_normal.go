//go:build !faultinject

package incarnation

// faultNoCheck is false in normal builds: the check always runs.
func faultNoCheck() bool { return false }
