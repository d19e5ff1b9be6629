package checker

import "testing"

func ordCall(caller string, start, end int, count int32, ranges ...[2]int64) Call {
	return Call{Caller: caller, Node: "n0", Biz: "b", SubKey: "k", Channel: Ordered, Served: Ordered, Count: count,
		Ranges: ranges, Start: at(start), End: at(end)}
}

func TestOrderedHoles(t *testing.T) {
	refused := ordCall("c2", 12, 14, 3)
	refused.Err = &Refusal{Code: 5, Retryable: true}
	dialFailed := ordCall("c3", 30, 31, 4)
	dialFailed.Transport = "dial tcp 127.0.0.1:1: connect: connection refused"
	timedOut := ordCall("c3", 40, 45, 2)
	timedOut.Transport = "i/o timeout"
	h := []Call{
		ordCall("c1", 0, 1, 2, [2]int64{1, 2}),
		ordCall("c1", 2, 3, 2, [2]int64{3, 4}),
		// 5..7 allocated to the refused call (c2 asked for 3).
		refused,
		ordCall("c1", 10, 20, 1, [2]int64{8, 8}),
		// 9..12 lost while only a refused dial failed: not explained.
		dialFailed,
		ordCall("c1", 25, 35, 1, [2]int64{13, 13}),
		// 14..15: the timed-out call may have had them.
		timedOut,
		ordCall("c1", 44, 50, 1, [2]int64{16, 16}),
		// An overlap is a duplicate, not a hole.
		ordCall("c2", 51, 52, 2, [2]int64{15, 16}),
		ordCall("c1", 53, 54, 1, [2]int64{17, 17}),
		{Caller: "x", Biz: "other", SubKey: "k", Channel: Ordered, Served: Ordered, Ranges: [][2]int64{{1, 1}, {5, 5}}, Start: at(0), End: at(1)},
	}
	ks := OrderedHoles(h, "b")
	if len(ks) != 1 {
		t.Fatalf("keys %+v", ks)
	}
	k := ks[0]
	if k.First != 1 || k.Last != 17 || k.Calls != 7 {
		t.Errorf("key %+v", k)
	}
	// A call without an answer may be served after its caller gave up:
	// it explains a later hole; a refusal does not.
	late := ordCall("c4", 0, 1, 5)
	late.Transport = "i/o timeout"
	lateRefused := ordCall("c5", 0, 1, 5)
	lateRefused.Err = &Refusal{Code: 5, Retryable: true}
	for _, c := range []struct {
		call Call
		want bool
	}{{late, true}, {lateRefused, false}} {
		h2 := []Call{c.call, ordCall("c1", 10, 11, 1, [2]int64{1, 1}), ordCall("c1", 12, 13, 1, [2]int64{4, 4})}
		if ks := OrderedHoles(h2, "b"); len(ks) != 1 || len(ks[0].Holes) != 1 || ks[0].Holes[0].Explained != c.want {
			t.Errorf("%s: %+v, want explained %v", c.call.Caller, ks, c.want)
		}
	}
	want := []struct {
		first, last int64
		explained   bool
	}{{5, 7, true}, {9, 12, false}, {14, 14, true}}
	if len(k.Holes) != len(want) {
		t.Fatalf("holes %+v", k.Holes)
	}
	for i, w := range want {
		if g := k.Holes[i]; g.First != w.first || g.Last != w.last || g.Explained != w.explained {
			t.Errorf("hole %d: %+v, want %+v", i, g, w)
		}
	}
	if n := len(k.Unexplained()); n != 1 {
		t.Errorf("unexplained %d", n)
	}
	if l, _ := k.Largest(); l.First != 9 {
		t.Errorf("largest %+v", l)
	}
	if m := k.Missing(); m != 3+4+1 {
		t.Errorf("missing %d", m)
	}
	if ks := OrderedHoles(h, ""); len(ks) != 2 || len(ks[0].Holes) != 3 || len(ks[1].Holes) != 1 {
		t.Errorf("all businesses: %+v", ks)
	}
}

func TestKeyOutage(t *testing.T) {
	h := []Call{
		ordCall("c1", 0, 100, 1, [2]int64{1, 1}),
		ordCall("c1", 100, 400, 1, [2]int64{2, 2}),
		ordCall("c1", 400, 450, 1, [2]int64{3, 3}),
	}
	g := KeyOutage(h, "b", []string{"k"}, at(0), at(600))
	if g.Len.Milliseconds() != 300 || !g.From.Equal(at(100)) {
		t.Errorf("outage %+v", g)
	}
	if g := KeyOutage(h, "b", []string{"other"}, at(0), at(600)); g.Len.Milliseconds() != 600 {
		t.Errorf("no calls: %+v", g)
	}
}
