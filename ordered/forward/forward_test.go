package forward

import (
	"errors"
	"testing"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// TestRouted: only a request that can be ORDERED (a sub key, and
// channel ORDERED, SLOW_ORDERED or none) and was not forwarded already is
// routed to the shard's owner; a forwarded one (no_forward) is answered or
// refused where it arrives, so forwarding never loops.
func TestRouted(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name string
		req  *idl.NextIDsRequest
		want bool
	}{
		{"ordered", &idl.NextIDsRequest{Biz: "b", Channel: ch(idl.Channel_ORDERED), SubKey: str("k")}, true},
		{"slow ordered", &idl.NextIDsRequest{Biz: "b", Channel: ch(idl.Channel_SLOW_ORDERED), SubKey: str("k")}, true},
		{"default channel with a sub key", &idl.NextIDsRequest{Biz: "b", SubKey: str("k")}, true},
		{"no_forward false", &idl.NextIDsRequest{Biz: "b", SubKey: str("k"), NoForward: &no}, true},
		{"forwarded already", &idl.NextIDsRequest{Biz: "b", Channel: ch(idl.Channel_ORDERED), SubKey: str("k"), NoForward: &yes}, false},
		{"no sub key", &idl.NextIDsRequest{Biz: "b", Channel: ch(idl.Channel_ORDERED)}, false},
		{"empty sub key", &idl.NextIDsRequest{Biz: "b", Channel: ch(idl.Channel_ORDERED), SubKey: str("")}, false},
		{"snowflake with a sub key", &idl.NextIDsRequest{Biz: "b", Channel: ch(idl.Channel_SNOWFLAKE), SubKey: str("k")}, false},
		{"unordered with a sub key", &idl.NextIDsRequest{Biz: "b", Channel: ch(idl.Channel_UNORDERED), SubKey: str("k")}, false},
	} {
		if got := Routed(tc.req); got != tc.want {
			t.Errorf("%s: Routed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestForwardedAnswers: a relayed answer must carry exactly the count
// asked for in one form, and only an owner's short retryable
// SEGMENT_UNAVAILABLE (a shard changing hands) is worth another look at
// the owner map; its limits' refusals are relayed at once.
func TestForwardedAnswers(t *testing.T) {
	r := func(f, l int64) *idl.IDRange { return &idl.IDRange{First: f, Last: l} }
	for _, tc := range []struct {
		name  string
		resp  *idl.NextIDsResponse
		count int
		want  bool
	}{
		{"one range", &idl.NextIDsResponse{Ranges: []*idl.IDRange{r(5, 7)}}, 3, true},
		{"two ranges", &idl.NextIDsResponse{Ranges: []*idl.IDRange{r(5, 6), r(9, 9)}}, 3, true},
		{"short range", &idl.NextIDsResponse{Ranges: []*idl.IDRange{r(5, 6)}}, 3, false},
		{"reversed range", &idl.NextIDsResponse{Ranges: []*idl.IDRange{r(7, 5)}}, 3, false},
		{"zero", &idl.NextIDsResponse{Ranges: []*idl.IDRange{r(0, 2)}}, 3, false},
		{"nil range", &idl.NextIDsResponse{Ranges: []*idl.IDRange{nil}}, 1, false},
		{"ids", &idl.NextIDsResponse{Ranges: []*idl.IDRange{}, Ids: []int64{-4, 9}}, 2, true},
		{"ids and a range", &idl.NextIDsResponse{Ranges: []*idl.IDRange{r(1, 2)}, Ids: []int64{-4, 9}}, 2, false},
		{"codes", &idl.NextIDsResponse{Codes: []string{"A1B2C3"}}, 1, true},
		{"too many codes", &idl.NextIDsResponse{Codes: []string{"A1B2C3", "D4E5F6"}}, 1, false},
		{"nothing", &idl.NextIDsResponse{}, 1, false},
	} {
		if got := wellFormed(tc.resp, tc.count); got != tc.want {
			t.Errorf("%s: wellFormed = %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Retryable: true, RetryAfterMs: 50}, true},
		{&idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Retryable: true, RetryAfterMs: 1000}, false}, // a lease wait
		{&idl.IdgenError{Code: idl.ErrorCode_RATE_LIMITED, Retryable: true, RetryAfterMs: 50}, false},
		{&idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT}, false},
		{errors.New("connection refused"), false},
		{nil, false},
	} {
		if got := Transition(tc.err); got != tc.want {
			t.Errorf("Transition(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func ch(c idl.Channel) *idl.Channel { return &c }
func str(s string) *string          { return &s }
