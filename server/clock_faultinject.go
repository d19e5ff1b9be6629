//go:build faultinject

package server

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/idgen/idgen/clock"
)

// newClock returns a shiftable clock and registers POST
// /debug/clock?offset_ms=N on the admin port (loopback callers only), so
// end-to-end tests can move a running node's clock. Only builds with the
// faultinject tag contain this file.
func newClock() (clock.Clock, func(*http.ServeMux)) {
	c := &clock.Offset{Base: clock.System{}}
	return c, func(mux *http.ServeMux) {
		mux.HandleFunc("/debug/clock", func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				http.Error(w, "loopback only", http.StatusForbidden)
				return
			}
			if r.Method == http.MethodPost {
				ms, err := strconv.ParseInt(r.URL.Query().Get("offset_ms"), 10, 64)
				if err != nil {
					http.Error(w, "want ?offset_ms=N (integer milliseconds, may be negative)", http.StatusBadRequest)
					return
				}
				c.Set(time.Duration(ms) * time.Millisecond)
			}
			fmt.Fprintf(w, "{\"offset_ms\":%d,\"now_ms\":%d}\n", c.Get().Milliseconds(), c.Now().UnixMilli())
		})
	}
}
