package scenario

import (
	"testing"
	"time"

	"github.com/idgen/idgen/faults/checker"
)

func TestSnowflakeNodeGaps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sf := func(node string, start, end int, fallback bool) checker.Call {
		return checker.Call{Node: node, Channel: checker.Snowflake, Served: checker.Snowflake, Fallback: fallback,
			Ranges: [][2]int64{{1, 1}}, Start: at(start), End: at(end)}
	}
	refused := checker.Call{Node: "n0", Channel: checker.Snowflake, Err: &checker.Refusal{Code: 4, Retryable: true},
		Start: at(150), End: at(160)}
	unordered := checker.Call{Node: "n0", Channel: checker.Unordered, Served: checker.Unordered,
		Ranges: [][2]int64{{5, 5}}, Start: at(300), End: at(310)}
	calls := []checker.Call{
		sf("n0", 0, 10, false), refused, sf("n0", 200, 210, true), unordered, sf("n0", 500, 510, false),
		// n1 starts late: its window begins at its first call.
		sf("n1", 400, 450, false), sf("n1", 460, 470, false),
	}
	gaps := snowflakeNodeGaps(calls, at(600))
	if len(gaps) != 2 {
		t.Fatalf("gaps %+v", gaps)
	}
	// n0: the refusal, the fallback answer and the UNORDERED answer do not
	// count, so its longest gap is 10 ms .. 510 ms.
	if g := gaps[0]; g.Key != "node/n0" || g.Len != 500*time.Millisecond {
		t.Errorf("n0: %+v", g)
	}
	// n1: from its first call (400 ms) the longest stretch is 470 .. 600.
	if g := gaps[1]; g.Key != "node/n1" || g.Len != 130*time.Millisecond {
		t.Errorf("n1: %+v", g)
	}
}
