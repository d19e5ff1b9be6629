package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/idgen/idgen/internal/mysqldb"
)

// ShardReport is what CheckShards found.
type ShardReport struct {
	Rows      int64 // ORDERED rows looked at
	Misplaced int64 // rows not in table Shard(sub_key)
	// MaskPlaced counts the misplaced rows that sit where the
	// (hashCode & 0x7fffffff) % 64 mapping puts them: evidence that the
	// data was written by a service that dropped the sign that way.
	MaskPlaced int64
	Examples   []MisplacedRow // the first few
}

// MisplacedRow is an ORDERED row found in the wrong table.
type MisplacedRow struct {
	Table  int // where it is
	Want   int // Shard(SubKey)
	Biz    string
	SubKey string
}

// Err describes misplaced rows as an error (nil when there are none).
// Serving ORDERED from such data would restart those sequences at
// start_num: numbers handed out before would be handed out again.
func (r ShardReport) Err() error {
	if r.Misplaced == 0 {
		return nil
	}
	var ex []string
	for _, m := range r.Examples {
		ex = append(ex, fmt.Sprintf("%s/%q in %s, expected %s", m.Biz, m.SubKey, mysqldb.OrderedTable(m.Table), mysqldb.OrderedTable(m.Want)))
	}
	return fmt.Errorf("mysqlstore: %d of %d ORDERED rows checked are not in the table Math.abs(hashCode) %% 64 picks "+
		"(%d of them are where (hashCode & 0x7fffffff) %% 64 would put them); the data was written with another "+
		"shard mapping and serving it would reissue numbers: run `idctl db check --mysql DSN` and see "+
		"segment/mysqlstore/README.md (e.g. %s)",
		r.Misplaced, r.Rows, r.MaskPlaced, strings.Join(ex, "; "))
}

// CheckShards reads up to limitPerTable rows of every ORDERED table (all
// rows when limitPerTable <= 0) and reports those that are not in the table
// the store would use for their sub key. Data written by this store is
// always in place; a misplaced row means it came from elsewhere (for
// example the older Java service with a different sign-dropping rule).
func CheckShards(ctx context.Context, db *sql.DB, limitPerTable int) (ShardReport, error) {
	var r ShardReport
	for t := 0; t < OrderedTables; t++ {
		q := `SELECT biz, sub_key FROM ` + mysqldb.OrderedTable(t)
		var args []any
		if limitPerTable > 0 {
			q += ` LIMIT ?`
			args = append(args, limitPerTable)
		}
		if err := checkTable(ctx, db, t, q, args, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

func checkTable(ctx context.Context, db *sql.DB, t int, q string, args []any, r *ShardReport) error {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var biz string
		var subKey []byte
		if err := rows.Scan(&biz, &subKey); err != nil {
			return err
		}
		r.Rows++
		k := string(subKey)
		want := Shard(k)
		if want == t {
			continue
		}
		r.Misplaced++
		if maskShard(k) == t {
			r.MaskPlaced++
		}
		if len(r.Examples) < 5 {
			r.Examples = append(r.Examples, MisplacedRow{Table: t, Want: want, Biz: biz, SubKey: k})
		}
	}
	return rows.Err()
}

// CheckShardsDSN runs CheckShards over every row of the DSN's database.
func CheckShardsDSN(ctx context.Context, dsn string) (ShardReport, error) {
	db, mc, err := openDB(dsn, DefaultTimeout)
	if err != nil {
		return ShardReport{}, err
	}
	defer db.Close()
	rep, err := CheckShards(ctx, db, 0)
	if err != nil {
		return rep, mysqldb.ClassifyErr(ctx, "check ORDERED shards in "+redactedDSN(mc), err, mc.Addr, DefaultTimeout)
	}
	return rep, nil
}
