package boltstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/idgen/idgen/internal/boltfile"
	"github.com/idgen/idgen/segment"
)

// bizRecord is a business as stored: JSON with snake_case keys so a person
// can read it with bbolt tooling, timestamps in UTC.
type bizRecord struct {
	Name        string   `json:"name"`
	Channel     int8     `json:"channel"`
	Step        int64    `json:"step"`
	LowWaterPct int      `json:"low_water_pct"`
	StartNum    int64    `json:"start_num"`
	Fallback    bool     `json:"fallback"`
	RateLimit   int      `json:"rate_limit"`
	IDQuota     int64    `json:"id_quota,omitempty"`
	IDBurst     int64    `json:"id_burst,omitempty"`
	Description string   `json:"description,omitempty"`
	Obfuscate   bool     `json:"obfuscate,omitempty"`
	Format      int8     `json:"format,omitempty"`
	CodeMinLen  int      `json:"code_min_length,omitempty"`
	Plugins     []string `json:"plugins,omitempty"`
	Key         []byte   `json:"secret_key,omitempty"`
	Issued      bool     `json:"issued,omitempty"`
	// OrderedMode: records written before it existed have none, which
	// reads as gapless (0), the default.
	OrderedMode int8 `json:"ordered_mode,omitempty"`
	// Tokens: records written before client tokens existed have none,
	// which reads as a business open to the shared client token, as
	// before.
	Tokens []segment.BizToken `json:"tokens,omitempty"`
	// Channels, as numbers (custom strategies' channels included):
	// records written before channel lists existed have none;
	// segment.StoredChannels says what they serve.
	Channels  []segment.Channel `json:"channels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
}

func encodeBiz(b segment.Biz) ([]byte, error) {
	return json.Marshal(bizRecord{
		Name: b.Name, Channel: int8(b.Channel), Step: b.Step, LowWaterPct: b.LowWaterPct,
		StartNum: b.StartNum, Fallback: b.Fallback, RateLimit: b.RateLimit,
		IDQuota: b.IDQuota, IDBurst: b.IDBurst, Description: b.Description,
		Obfuscate: b.Obfuscate, Format: int8(b.Format), CodeMinLen: b.CodeMinLength, Plugins: b.Plugins,
		Key: []byte(b.Key), Issued: b.Issued, OrderedMode: int8(b.OrderedMode), Tokens: b.Tokens,
		Channels: b.Channels, CreatedAt: b.CreatedAt.UTC(), UpdatedAt: b.UpdatedAt.UTC(),
	})
}

func decodeBiz(v []byte) (segment.Biz, error) {
	var r bizRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return segment.Biz{}, fmt.Errorf("decode biz: %w", err)
	}
	b := segment.Biz{
		Name: r.Name, Channel: segment.Channel(r.Channel), Step: r.Step, LowWaterPct: r.LowWaterPct,
		StartNum: r.StartNum, Fallback: r.Fallback, RateLimit: r.RateLimit,
		IDQuota: r.IDQuota, IDBurst: r.IDBurst, Description: r.Description,
		Obfuscate: r.Obfuscate, Format: segment.Format(r.Format), CodeMinLength: r.CodeMinLen, Plugins: r.Plugins,
		Key: r.Key, Issued: segment.StoredIssued(r.Issued, r.Key), OrderedMode: segment.OrderedMode(r.OrderedMode), Tokens: r.Tokens,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
	b.Channels = segment.StoredChannels(r.Channels, b)
	return b, nil
}

// CreateBiz implements segment.Store: it stores b with defaults filled in
// and its UNORDERED counter at StartNum-1, in one transaction.
func (s *Store) CreateBiz(ctx context.Context, b segment.Biz) (segment.Biz, error) {
	if err := ctx.Err(); err != nil {
		return segment.Biz{}, err
	}
	b, err := segment.NormalizeBiz(b)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("boltstore: create biz: %w", err)
	}
	now := s.opts.Clock.Now().UTC()
	b.CreatedAt, b.UpdatedAt = now, now
	v, err := encodeBiz(b)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("boltstore: create biz %q: %w", b.Name, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		bb := tx.Bucket(bucketBiz)
		if bb.Get([]byte(b.Name)) != nil {
			return fmt.Errorf("boltstore: create biz %q: %w", b.Name, segment.ErrBizExists)
		}
		if err := bb.Put([]byte(b.Name), v); err != nil {
			return err
		}
		return tx.Bucket(bucketSegments).Put([]byte(b.Name), boltfile.U64(b.StartNum-1))
	})
	if err != nil {
		return segment.Biz{}, err
	}
	return b, nil
}

// UpdateBiz implements segment.Store.
func (s *Store) UpdateBiz(ctx context.Context, name string, u segment.BizUpdate) (segment.Biz, error) {
	if err := ctx.Err(); err != nil {
		return segment.Biz{}, err
	}
	var out segment.Biz
	err := s.db.Update(func(tx *bolt.Tx) error {
		bb := tx.Bucket(bucketBiz)
		v := bb.Get([]byte(name))
		if v == nil {
			return fmt.Errorf("boltstore: update biz %q: %w", name, segment.ErrUnknownBiz)
		}
		b, err := decodeBiz(v)
		if err != nil {
			return err
		}
		if b, err = segment.ApplyBizUpdate(b, u, s.opts.Clock.Now()); err != nil {
			return fmt.Errorf("boltstore: update biz: %w", err)
		}
		nv, err := encodeBiz(b)
		if err != nil {
			return err
		}
		out = b
		return bb.Put([]byte(name), nv)
	})
	if err != nil {
		return segment.Biz{}, err
	}
	return out, nil
}

// GetBiz implements segment.Store.
func (s *Store) GetBiz(ctx context.Context, name string) (segment.Biz, error) {
	if err := ctx.Err(); err != nil {
		return segment.Biz{}, err
	}
	var out segment.Biz
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketBiz).Get([]byte(name))
		if v == nil {
			return fmt.Errorf("boltstore: get biz %q: %w", name, segment.ErrUnknownBiz)
		}
		var err error
		out, err = decodeBiz(v)
		return err
	})
	return out, err
}

// ListBiz implements segment.Store; businesses come sorted by name.
func (s *Store) ListBiz(ctx context.Context) ([]segment.Biz, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := []segment.Biz{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBiz).ForEach(func(_, v []byte) error {
			b, err := decodeBiz(v)
			if err != nil {
				return err
			}
			out = append(out, b)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("boltstore: list biz: %w", err)
	}
	return out, nil
}
