//go:build !faultinject

package server

import (
	"go.uber.org/zap"

	"github.com/idgen/idgen/worker"
)

// faultSlot returns s unchanged: normal builds have no way to skip the wait
// past a slot's high-water mark (see holder_faultinject.go).
func faultSlot(s worker.Slot) worker.Slot { return s }

// faultInjectBuild: this binary has the faultinject hooks.
const faultInjectBuild = false

// faultNoReplicationGuard is false: normal builds always run the
// cross-node replication guard (see holder_faultinject.go).
func faultNoReplicationGuard() bool { return false }

// faultOrderedNoLeaseWait and faultOrderedNoEpoch are false: normal builds
// always wait out an old owner's lease and fence persists by the epoch.
func faultOrderedNoLeaseWait() bool { return false }
func faultOrderedNoEpoch() bool     { return false }

// faultHandOffStall is nil: normal builds write back at once.
func faultHandOffStall(*zap.Logger) func(int) { return nil }
