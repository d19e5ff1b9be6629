package harness

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/idgen/idgen/internal/testnode/zkensemble"
)

// StartEnsemble starts an n-server ZooKeeper ensemble on fresh loopback
// ports with its servers and data dirs under dir, and waits until it
// serves. The ensemble scenarios run on it instead of the suite's single
// server: production runs ensembles, where leader elections, rolling
// restarts and restores happen, and a single server has none of them. Each
// server's pid is kept in PidDir (zk-ens-<myid>.pid) while it runs, so
// ./build.sh faults stops what a crashed run left; the servers also die with
// the suite (PDEATHSIG).
func StartEnsemble(dir string, n int) (*zkensemble.Ensemble, error) {
	cfg := zkensemble.Config{Dir: dir, N: n}
	if PidDir != "" {
		cfg.PidFile = func(i int) string { return filepath.Join(PidDir, fmt.Sprintf("zk-ens-%d.pid", i+1)) }
	}
	z, err := zkensemble.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := z.StartAll(120 * time.Second); err != nil {
		z.Close()
		return nil, err
	}
	return z, nil
}
