package testnode

import (
	"os"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode/zkensemble"
)

// Ensemble is a ZooKeeper ensemble of one test alone (n servers on
// loopback, one data dir each), so the test can kill its leader, restart
// servers one by one or restore it from a copy of its data dirs: what
// production ensembles go through and a single server never shows.
// Servers are numbered from 0 (server i has myid i+1). Every method fails
// the test on an error; Z exposes the error-returning ensemble underneath.
type Ensemble struct {
	t testing.TB
	Z *zkensemble.Ensemble
}

// StartEnsemble starts n ZooKeeper servers (tickTime 500 ms) on free
// loopback ports, waits until they serve with one leader, and stops them
// when the test ends. It skips the test when ZooKeeper is not installed.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	if !zkensemble.Installed() {
		t.Skip(zkensemble.Script + " not found: ./build.sh test installs ZooKeeper")
	}
	dir, err := os.MkdirTemp("", "idgen-zkens-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	z, err := zkensemble.New(zkensemble.Config{Dir: dir, N: n})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the RemoveAll, so it runs first: the servers stop
	// before their dirs go.
	t.Cleanup(z.Close)
	if err := z.StartAll(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	return &Ensemble{t: t, Z: z}
}

func (e *Ensemble) check(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// Addrs returns every server's client address (host:port), in server order.
func (e *Ensemble) Addrs() []string { return e.Z.Addrs() }

// Connect returns the connect string, the addresses joined by commas.
func (e *Ensemble) Connect() string { return e.Z.Connect() }

// Kill SIGKILLs server i and waits until it has exited.
func (e *Ensemble) Kill(i int) { e.t.Helper(); e.check(e.Z.Kill(i)) }

// Stop shuts server i down cleanly (SIGTERM) and waits until it has exited.
func (e *Ensemble) Stop(i int) { e.t.Helper(); e.check(e.Z.Stop(i)) }

// Start starts server i again with its data and waits until its client
// port accepts; WaitServing waits until it has rejoined the quorum.
func (e *Ensemble) Start(i int) { e.t.Helper(); e.check(e.Z.Start(i)) }

// Leader returns the server that leads, or -1 during an election (asked
// with the `srvr` four-letter word).
func (e *Ensemble) Leader() int { return e.Z.Leader() }

// WaitLeader waits until a server other than not (-1: any) leads a serving
// majority, at most d, and returns it.
func (e *Ensemble) WaitLeader(not int, d time.Duration) int {
	e.t.Helper()
	l, err := e.Z.WaitLeader(not, d)
	e.check(err)
	return l
}

// WaitServing waits until every running server serves and one leads, at
// most d.
func (e *Ensemble) WaitServing(d time.Duration) { e.t.Helper(); e.check(e.Z.WaitServing(d)) }

// Snapshot copies every data dir while the ensemble runs (what operators
// back up and restore from) into a temp dir removed after the test, and
// returns that dir for Restore.
func (e *Ensemble) Snapshot() string {
	e.t.Helper()
	dir, err := os.MkdirTemp("", "idgen-zksnap-")
	e.check(err)
	e.t.Cleanup(func() { os.RemoveAll(dir) })
	e.check(e.Z.Snapshot(dir))
	return dir
}

// Restore stops every server, replaces the data dirs by the copies in snap,
// starts them all and waits until the ensemble serves: everything written
// after the snapshot is gone, zxids included.
func (e *Ensemble) Restore(snap string) { e.t.Helper(); e.check(e.Z.Restore(snap, 90*time.Second)) }
