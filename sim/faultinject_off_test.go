//go:build !faultinject

package sim

// faultInjectBuild: without -tags faultinject the packages' IDGEN_FAULT_*
// switches are no-ops, so the controls that need them are skipped.
const faultInjectBuild = false
