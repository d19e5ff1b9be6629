//go:build !faultinject

package mysqllease

func faultNoRegistryFenceSet() bool { return false }
