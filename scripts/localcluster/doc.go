// Package localcluster holds the test of `./build.sh cluster up|down`
// (scripts/cluster.sh): the local cluster a new user starts first, run
// end to end as the README tells it. It has no code of its own.
package localcluster
