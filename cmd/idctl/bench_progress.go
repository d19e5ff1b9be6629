package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress writes live progress to stderr: one line redrawn in place on a
// terminal, plain lines every interval otherwise (logs, CI, scripts).
// A nil *progress or a zero interval writes nothing.
type progress struct {
	w     io.Writer
	tty   bool
	every time.Duration
}

// ttyRedraw is how often the terminal line is redrawn.
const ttyRedraw = 200 * time.Millisecond

func newProgress(w io.Writer, every time.Duration) *progress {
	return &progress{w: w, every: every, tty: isTerminal(w)}
}

// isTerminal reports whether w is a character device (a terminal). It
// uses os.File.Stat rather than golang.org/x/term, which the service's
// module does not require directly.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// start begins reporting one phase and returns the function that ends it.
func (p *progress) start(name string, start time.Time, d time.Duration, requests int64, ok, failed, ids *atomic.Int64) (stop func()) {
	if p == nil || p.every <= 0 {
		return func() {}
	}
	every := p.every
	if p.tty {
		every = ttyRedraw
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		lastAt, lastOK, lastIDs := start, int64(0), int64(0)
		for {
			select {
			case <-done:
				if p.tty {
					fmt.Fprint(p.w, "\r\033[K")
				}
				return
			case now := <-t.C:
				o, f, n := ok.Load(), failed.Load(), ids.Load()
				dt := now.Sub(lastAt).Seconds()
				line := progressLine(name, now.Sub(start), d, requests, o, f, float64(o-lastOK)/dt, float64(n-lastIDs)/dt, p.tty)
				if p.tty {
					fmt.Fprint(p.w, "\r"+line+"\033[K")
				} else {
					fmt.Fprintln(p.w, line)
				}
				lastAt, lastOK, lastIDs = now, o, n
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// progressLine formats one progress report; rates are over the last
// interval.
func progressLine(name string, elapsed, d time.Duration, requests, ok, failed int64, rps, idps float64, bar bool) string {
	var frac float64
	var where string
	if requests > 0 {
		frac = float64(ok+failed) / float64(requests)
		where = fmt.Sprintf("%d/%d req", ok+failed, requests)
	} else {
		frac = elapsed.Seconds() / d.Seconds()
		where = fmt.Sprintf("%.1fs/%.1fs", elapsed.Seconds(), d.Seconds())
	}
	frac = min(max(frac, 0), 1)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s ", name, where)
	if bar {
		const width = 24
		n := int(frac * width)
		sb.WriteString("[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "] ")
	}
	fmt.Fprintf(&sb, "%3.0f%%  %.0f req/s  %.0f IDs/s  %d errors", frac*100, rps, idps, failed)
	return sb.String()
}
