package mysqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

var _ segment.Raiser = (*Store)(nil)

// RaiseSegment raises the business's max_id to at least atLeast, in one
// statement conditional by GREATEST: a counter another node moved further
// meanwhile is never lowered.
func (s *Store) RaiseSegment(ctx context.Context, biz string, atLeast int64) error {
	op := fmt.Sprintf("raise segment of %q to %d", biz, atLeast)
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err := s.conn.RetryConflicts(cctx, op, func() error {
		_, err := s.db.ExecContext(cctx, `UPDATE segment SET max_id = GREATEST(max_id, ?), updated_at = ? WHERE biz = ?`,
			atLeast, mysqldb.Now(), biz)
		return err
	})
	return s.conn.Classify(ctx, op, err)
}

// RaiseOrdered raises the ORDERED rows of marks to at least their Last
// (creating missing rows: the failover may have lost their creation), in
// batches of one statement per shard table, each conditional by GREATEST.
// Each batch is bounded by Config.Timeout.
func (s *Store) RaiseOrdered(ctx context.Context, marks []segment.OrderedMark) error {
	byShard := map[int][]segment.OrderedMark{}
	for _, m := range marks {
		if m.Last < 1 || !validSubKey(m.SubKey) || len(m.SubKey) > subKeyColumnBytes {
			continue
		}
		sh := Shard(m.SubKey)
		byShard[sh] = append(byShard[sh], m)
	}
	for sh, ms := range byShard {
		for len(ms) > 0 {
			n := min(len(ms), mysqldb.Batch)
			if err := s.raiseOrderedBatch(ctx, sh, ms[:n]); err != nil {
				return err
			}
			ms = ms[n:]
		}
	}
	return nil
}

func (s *Store) raiseOrderedBatch(ctx context.Context, shard int, ms []segment.OrderedMark) error {
	t := mysqldb.OrderedTable(shard)
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + t + ` (biz, sub_key, num) VALUES `)
	args := make([]any, 0, 3*len(ms))
	for i, m := range ms {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("(?, ?, ?)")
		args = append(args, m.Biz, []byte(m.SubKey), m.Last)
	}
	b.WriteString(` ON DUPLICATE KEY UPDATE num = GREATEST(num, VALUES(num))`)
	op := fmt.Sprintf("raise %d ORDERED rows in %s", len(ms), t)
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err := s.conn.RetryConflicts(cctx, op, func() error {
		_, err := s.db.ExecContext(cctx, b.String(), args...)
		return err
	})
	return s.conn.Classify(ctx, op, err)
}

// RestoreRequests stores the ORDERED request ids of reqs that the store
// lacks, leaving a stored one as it is: the barrier's repair after a
// lossy failover (ordered.Allocator.RememberedRequests), whose new server
// may have lost the ids of the last group commits with their rows. Not
// fenced: it runs while the barrier holds every persist back, and a
// stored id never changes. It is the barrier's repair, like RaiseOrdered,
// so it is here rather than in the owners' store (ordered/mysqlstore),
// which writes and reads these ids and holds its test
// (TestRestoreRequests).
func (s *Store) RestoreRequests(ctx context.Context, reqs []ordered.Request) error {
	var valid []ordered.Request
	for _, q := range reqs {
		if ordered.ValidatePersist(Shard(q.SubKey), nil, []ordered.Request{q}) == nil {
			valid = append(valid, q)
		}
	}
	for _, st := range mysqldb.RequestInserts(valid, mysqldb.Now(), " ON DUPLICATE KEY UPDATE biz = biz") {
		op := fmt.Sprintf("restore %d ORDERED request ids", len(st.Args)/7)
		cctx, cancel := s.conn.OpContext(ctx)
		err := s.conn.RetryConflicts(cctx, op, func() error {
			_, err := s.db.ExecContext(cctx, st.SQL, st.Args...)
			return err
		})
		cancel()
		if err != nil {
			return s.conn.Classify(ctx, op, err)
		}
	}
	return nil
}
