//go:build faultinject

package sim

// faultInjectBuild: the packages read their IDGEN_FAULT_* switches from
// the environment (the controls that reopen a hole inside a package, not
// through sim.controls, can run).
const faultInjectBuild = true
