//go:build !faultinject

package server

import "github.com/idgen/idgen/worker"

// faultSlot returns s unchanged: normal builds have no way to skip the wait
// past a slot's high-water mark (see holder_faultinject.go).
func faultSlot(s worker.Slot) worker.Slot { return s }

// faultInjectBuild: this binary has the faultinject hooks.
const faultInjectBuild = false

// faultNoReplicationGuard is false: normal builds always run the
// cross-node replication guard (see holder_faultinject.go).
func faultNoReplicationGuard() bool { return false }
