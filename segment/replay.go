package segment

import "context"

// ReplayReporter is an optional Store extension. ReserveOrderedReplay is
// ReserveOrdered that also says whether the range is the stored answer to an
// earlier request with the same request id (a retry) rather than a new
// reservation.
//
// Why it exists: the Ordered processor refuses ranges that are not above
// what it already saw for a key (a store that went backwards), but a
// legitimate retry returns an old range by design, possibly one first served
// by another node. Only the store knows which case it is. With a store that
// does not implement this interface the processor cannot tell, so it skips
// the regression check for requests that carry a request id.
type ReplayReporter interface {
	ReserveOrderedReplay(ctx context.Context, req OrderedRequest) (Reservation, error)
}

// Reservation is what ReserveOrderedReplay reserved.
type Reservation struct {
	Range
	// Replayed: the range is the stored answer to an earlier request with
	// the same request id.
	Replayed bool
	// Raised: the store's counter was below OrderedRequest.Above and was
	// raised before reserving (the store had gone backwards).
	Raised bool
}

// OrderedMark is the highest number of one (Biz, SubKey) that a node
// handed out.
type OrderedMark struct {
	Biz, SubKey string
	Last        int64
}

// Marks collects what a Remembered method (the ORDERED owners', or the
// per-request path's) reports, for a barrier's raise.
func Marks(remembered func(fn func(biz, subKey string, last int64))) []OrderedMark {
	var marks []OrderedMark
	remembered(func(biz, sub string, last int64) {
		marks = append(marks, OrderedMark{Biz: biz, SubKey: sub, Last: last})
	})
	return marks
}

// Raiser is an optional Store extension: it repairs counters that went
// backwards (a failover to a lagging replica lost reservations) by raising
// them, never lowering them, so the next reservation starts above numbers
// the cluster already handed out.
type Raiser interface {
	// RaiseSegment raises the business's UNORDERED counter to at least
	// atLeast.
	RaiseSegment(ctx context.Context, biz string, atLeast int64) error
	// RaiseOrdered raises each mark's ORDERED row to at least its Last,
	// creating missing rows.
	RaiseOrdered(ctx context.Context, marks []OrderedMark) error
}
