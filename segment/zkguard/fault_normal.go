//go:build !faultinject

package zkguard

// Normal builds never reopen a hole (see fault_faultinject.go).

func faultUnverifiedNotRecorded() bool { return false }
func faultGuardOwnClient() bool        { return false }
func faultEphemeralMembers() bool      { return false }
func faultNoRestoreReset() bool        { return false }
func faultIgnoreParted() bool          { return false }
func faultNoOutageGrace() bool         { return false }
func faultNoRestoreHold() bool         { return false }
func faultMemberPerNode() bool         { return false }
func faultBoundAnyReplication() bool   { return false }
func faultStaleMemberWrite() bool      { return false }
