// Package bench holds Go benchmarks that put idgen's generator and
// UNORDERED hand-out path side by side with other snowflake libraries
// (github.com/bwmarrin/snowflake, github.com/sony/sonyflake/v2) on the
// same workloads. It is its own module so that those libraries never enter
// the service's go.mod; see BENCHMARKS.md at the repository root.
//
//	cd bench && go test -run '^$' -bench . -count 3
package bench
