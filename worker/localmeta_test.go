package worker

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLocalMetaCreatesThenChecks(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	first, err := LocalMeta(dir, Meta{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if first.CreatedMs != t0.UnixMilli() || first.EpochMs != DefaultEpochMs || first.IDCBits != DefaultIDCBits {
		t.Fatalf("created %+v", first)
	}
	again, err := LocalMeta(dir, Meta{}, t0.Add(time.Hour))
	if err != nil || again != first {
		t.Fatalf("reopen = %+v, %v; want %+v (created_ms kept)", again, err, first)
	}
	_, err = LocalMeta(dir, Meta{IDCBits: 3, NodeBits: 7}, t0)
	if !errors.Is(err, ErrMetaMismatch) || !strings.Contains(err.Error(), "idc_bits is 2 in "+dir) {
		t.Fatalf("err = %v, want ErrMetaMismatch naming idc_bits and the file", err)
	}
}
