package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminMux serves the admin port. It answers from the first moment of the
// process: /healthz is liveness (the process runs), /readyz readiness.
//
// /readyz is 200 while every channel the node is configured for can serve
// or (snowflake refusing at run time) fall back to segments, so a load
// balancer does not pull UNORDERED and ORDERED traffic from a node whose
// clock stepped back. /readyz?channel=snowflake (or unordered, ordered) is
// strict: 503 whenever that channel itself refuses. The body is JSON with
// each channel's state and reason, and while starting the wait remaining.
func adminMux(nd *node, m *metrics, debug func(*http.ServeMux)) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		st := nd.status()
		ready := st.Ready
		if ch := r.URL.Query().Get("channel"); ch != "" {
			c, ok := st.Channels[ch]
			if !ok {
				http.Error(w, fmt.Sprintf("unknown channel %q: want snowflake, unordered or ordered", ch), http.StatusBadRequest)
				return
			}
			ready = c.Ready
		}
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	debug(mux)
	return mux
}
