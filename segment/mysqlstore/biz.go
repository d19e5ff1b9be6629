package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/segment"
)

// validName reports whether a business with this name can exist.
func validName(s string) bool { return segment.ValidateBizName(s) == nil }

// checkDescription adds to segment's validation what the utf8mb4 column
// needs: the description must be valid UTF-8 (MySQL in strict mode refuses
// anything else, and in non-strict mode would store '?' instead).
func checkDescription(name, desc string) error {
	if !utf8.ValidString(desc) {
		return fmt.Errorf("%w: biz %q: description is not valid UTF-8", segment.ErrInvalid, name)
	}
	return nil
}

// CreateBiz inserts the business and its UNORDERED segment row (max_id =
// start_num - 1) in one transaction. A segment row left behind by a
// business deleted by hand keeps its max_id if that is higher, so
// re-creating a business never reissues numbers.
func (s *Store) CreateBiz(ctx context.Context, b segment.Biz) (segment.Biz, error) {
	op := fmt.Sprintf("create business %q", b.Name)
	b, err := segment.NormalizeBiz(b)
	if err == nil {
		err = checkDescription(b.Name, b.Description)
	}
	if err != nil {
		return segment.Biz{}, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	t := mysqldb.Now()
	b.CreatedAt, b.UpdatedAt = t, t
	tokens, err := encodeTokens(b.Tokens)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err = s.inTx(cctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(cctx, `INSERT INTO biz (name, channel, step, low_water_pct, start_num, fallback,
  rate_limit, id_quota, id_burst, description, obfuscate, format, code_min_length, plugins, secret_key, issued,
  tokens, ordered_mode, channels, created_at, updated_at)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			b.Name, int(b.Channel), b.Step, b.LowWaterPct, b.StartNum, b.Fallback, b.RateLimit, b.IDQuota, b.IDBurst,
			b.Description, b.Obfuscate, int(b.Format), b.CodeMinLength, strings.Join(b.Plugins, ","), []byte(b.Key),
			b.Issued, tokens, int(b.OrderedMode), encodeChannels(b.Channels), t, t)
		if mysqldb.IsDupEntry(err) {
			return segment.ErrBizExists
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(cctx, `INSERT INTO segment (biz, max_id, step, updated_at) VALUES (?, ?, ?, ?)
  ON DUPLICATE KEY UPDATE max_id = GREATEST(max_id, ?)`,
			b.Name, b.StartNum-1, b.Step, t, b.StartNum-1)
		return err
	})
	if err != nil {
		return segment.Biz{}, s.conn.Classify(ctx, op, err)
	}
	return b, nil
}

// UpdateBiz changes the given fields under a row lock and returns the new
// settings. The read (SELECT ... FOR UPDATE), segment.ApplyBizUpdate and
// the write are one transaction: concurrent updates of one business take
// turns on the row, so two AddToken calls both land (neither rewrites the
// token list as it was before the other's commit).
func (s *Store) UpdateBiz(ctx context.Context, name string, u segment.BizUpdate) (segment.Biz, error) {
	op := fmt.Sprintf("update business %q", name)
	if !validName(name) {
		return segment.Biz{}, fmt.Errorf("mysqlstore: %s: %w", op, segment.ErrUnknownBiz)
	}
	var b segment.Biz
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err := s.inTx(cctx, func(tx *sql.Tx) error {
		var err error
		b, err = scanBiz(tx.QueryRowContext(cctx, selectBiz+` WHERE name = ? FOR UPDATE`, name))
		if err != nil {
			return err
		}
		b, err = segment.ApplyBizUpdate(b, u, mysqldb.Now())
		if err == nil {
			err = checkDescription(b.Name, b.Description)
		}
		if err != nil {
			return err
		}
		b.UpdatedAt = b.UpdatedAt.Truncate(time.Microsecond)
		tokens, err := encodeTokens(b.Tokens)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(cctx, `UPDATE biz SET channel = ?, step = ?, low_water_pct = ?, fallback = ?,
  rate_limit = ?, id_quota = ?, id_burst = ?, description = ?, obfuscate = ?, format = ?, code_min_length = ?,
  plugins = ?, secret_key = ?, issued = ?, tokens = ?, ordered_mode = ?, channels = ?, updated_at = ? WHERE name = ?`,
			int(b.Channel), b.Step, b.LowWaterPct, b.Fallback, b.RateLimit, b.IDQuota, b.IDBurst, b.Description,
			b.Obfuscate, int(b.Format), b.CodeMinLength, strings.Join(b.Plugins, ","), []byte(b.Key), b.Issued,
			tokens, int(b.OrderedMode), encodeChannels(b.Channels), b.UpdatedAt, name)
		return err
	})
	if err != nil {
		return segment.Biz{}, s.conn.Classify(ctx, op, err)
	}
	return b, nil
}

// GetBiz returns the business's settings.
func (s *Store) GetBiz(ctx context.Context, name string) (segment.Biz, error) {
	op := fmt.Sprintf("get business %q", name)
	if !validName(name) {
		return segment.Biz{}, fmt.Errorf("mysqlstore: %s: %w", op, segment.ErrUnknownBiz)
	}
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	b, err := scanBiz(s.db.QueryRowContext(cctx, selectBiz+` WHERE name = ?`, name))
	if err != nil {
		return segment.Biz{}, s.conn.Classify(ctx, op, err)
	}
	return b, nil
}

// ListBiz returns every business, by name.
func (s *Store) ListBiz(ctx context.Context) ([]segment.Biz, error) {
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(cctx, selectBiz+` ORDER BY name`)
	if err != nil {
		return nil, s.conn.Classify(ctx, "list businesses", err)
	}
	defer rows.Close()
	var out []segment.Biz
	for rows.Next() {
		b, err := scanBiz(rows)
		if err != nil {
			return nil, s.conn.Classify(ctx, "list businesses", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, s.conn.Classify(ctx, "list businesses", err)
	}
	return out, nil
}

const selectBiz = `SELECT name, channel, step, low_water_pct, start_num, fallback, rate_limit, id_quota, id_burst,
  description, obfuscate, format, code_min_length, plugins, secret_key, issued, tokens, ordered_mode, channels,
  created_at, updated_at
  FROM biz`

func scanBiz(row interface{ Scan(...any) error }) (segment.Biz, error) {
	var (
		b       segment.Biz
		ch, f   int
		mode    int
		plugins string
		key     []byte
		tokens  sql.NullString
		chans   string
	)
	err := row.Scan(&b.Name, &ch, &b.Step, &b.LowWaterPct, &b.StartNum, &b.Fallback, &b.RateLimit, &b.IDQuota, &b.IDBurst,
		&b.Description, &b.Obfuscate, &f, &b.CodeMinLength, &plugins, &key, &b.Issued, &tokens, &mode, &chans,
		&b.CreatedAt, &b.UpdatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return segment.Biz{}, segment.ErrUnknownBiz
	}
	if err != nil {
		return segment.Biz{}, err
	}
	b.Channel, b.Format, b.OrderedMode = segment.Channel(ch), segment.Format(f), segment.OrderedMode(mode)
	if plugins != "" {
		b.Plugins = strings.Split(plugins, ",")
	}
	if len(key) > 0 {
		b.Key = key
	}
	if b.Tokens, err = decodeTokens(tokens.String); err != nil {
		return segment.Biz{}, fmt.Errorf("business %q: %w", b.Name, err)
	}
	chs, err := decodeChannels(chans)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("business %q: %w", b.Name, err)
	}
	b.Channels = segment.StoredChannels(chs, b)
	return b, nil
}

// encodeChannels returns the biz.channels value of chs: numbers, comma
// separated.
func encodeChannels(chs []segment.Channel) string {
	parts := make([]string, len(chs))
	for i, ch := range chs {
		parts[i] = strconv.Itoa(int(ch))
	}
	return strings.Join(parts, ",")
}

// decodeChannels reads biz.channels; the empty string is none (a row from before
// schema 8: segment.StoredChannels decides).
func decodeChannels(v string) ([]segment.Channel, error) {
	if v == "" {
		return nil, nil
	}
	var out []segment.Channel
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 127 {
			return nil, fmt.Errorf("column channels %q is not a list of channel numbers 0..127 (edited by hand? fix it, e.g. '0,2')", v)
		}
		out = append(out, segment.Channel(n))
	}
	return out, nil
}

// encodeTokens returns the biz.tokens value of ts (segment.BizToken's
// JSON form): NULL for none, as in rows from before schema 5.
func encodeTokens(ts []segment.BizToken) (sql.NullString, error) {
	if len(ts) == 0 {
		return sql.NullString{}, nil
	}
	v, err := json.Marshal(ts)
	if err != nil {
		return sql.NullString{}, fmt.Errorf("encode tokens: %w", err)
	}
	return sql.NullString{String: string(v), Valid: true}, nil
}

// decodeTokens reads biz.tokens; NULL and the empty string are no tokens.
func decodeTokens(v string) ([]segment.BizToken, error) {
	if v == "" {
		return nil, nil
	}
	var out []segment.BizToken
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("column tokens is not a JSON list of tokens (edited by hand? fix or clear it): %w", err)
	}
	return out, nil
}

// inTx runs f in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
