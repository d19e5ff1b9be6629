package ext

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idgen/idgen/segment"
)

type namedStrategy string

func (s namedStrategy) Name() string { return string(s) }
func (namedStrategy) Generate(context.Context, Request) (Result, error) {
	return Result{}, nil
}

// TestServeUnknownChannelNamesRegistered: the refusal of an unregistered
// channel lists the registered ones by number and name; channel 3 (and
// any custom one) is never called "unknown".
func TestServeUnknownChannelNamesRegistered(t *testing.T) {
	r := NewRegistry()
	for ch, name := range map[segment.Channel]string{0: "unordered", 3: "slow_ordered", 16: "dateorder"} {
		if err := r.RegisterStrategy(ch, namedStrategy(name)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := r.Serve(context.Background(), Request{Channel: 7})
	if !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("Serve(7): %v, want ErrInvalid", err)
	}
	if want := "registered: 0 (unordered), 3 (slow_ordered), 16 (dateorder)"; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "unknown") {
		t.Fatalf("message %q, want it to contain %q and no \"unknown\"", err.Error(), want)
	}
}
