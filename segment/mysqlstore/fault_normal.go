//go:build !faultinject

package mysqlstore

// faultNoSessionIdleLimit is false: normal builds always bound the
// sessions' idle time (mysqldb.SessionIdleLimit; see fault_faultinject.go).
func faultNoSessionIdleLimit() bool { return false }

// faultNoReplicaNowIsNone is false: normal builds never read "no replica
// connected right now" as "no replica" (see fault_faultinject.go).
func faultNoReplicaNowIsNone() bool { return false }
