package main

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/worker"
)

// nodeState derives the node's state from the issuer and the lease; it is
// what Clock() answers, what /readyz reports and what metrics export.
type nodeState struct {
	is    *issuer.Issuer
	lease worker.Lease
}

// String returns serving, clock_rollback, fenced, degraded or starting.
func (s *nodeState) String() string {
	state, _ := s.check()
	return state
}

// check returns the state and, when snowflake cannot serve, why.
func (s *nodeState) check() (string, string) {
	g := s.is.Guard()
	if b := g.Behind(); b > g.MaxBackwardWait() {
		return "clock_rollback", fmt.Sprintf("clock is %v behind the last issued timestamp (tolerance %v): refusing snowflake until it catches up", b, g.MaxBackwardWait())
	}
	if ok, why := s.is.Serving(); !ok {
		if s.lease.State() == worker.StateNone {
			return "starting", fmt.Sprintf("no worker slot: %v", why)
		}
		return "fenced", fmt.Sprintf("worker slot not held: %v", why)
	}
	if s.lease.State() == worker.StateDegraded {
		return "degraded", "serving from the cached worker slot while ZooKeeper is unreachable"
	}
	return "serving", ""
}

func adminMux(st *nodeState, m *metrics, debug func(*http.ServeMux)) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		state, reason := st.check()
		ready := state == "serving" || state == "degraded"
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": ready, "state": state, "reason": reason})
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	debug(mux)
	return mux
}
