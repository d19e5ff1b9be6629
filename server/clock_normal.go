//go:build !faultinject

package server

import (
	"net/http"

	"github.com/idgen/idgen/clock"
)

// newClock returns the system clock. Normal builds have no way to shift it:
// the /debug/clock endpoint exists only with the faultinject build tag.
func newClock() (clock.Clock, func(*http.ServeMux)) {
	return clock.System{}, func(*http.ServeMux) {}
}
