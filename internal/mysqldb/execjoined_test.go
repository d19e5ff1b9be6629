package mysqldb

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
)

// recorder is an Execer that records what it is sent and fails the
// query holding fail.
type recorder struct {
	queries []string
	nargs   []int
	fail    string
}

func (r *recorder) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	r.queries = append(r.queries, q)
	r.nargs = append(r.nargs, len(args))
	if r.fail != "" && strings.Contains(q, r.fail) {
		return nil, errors.New("refused")
	}
	return nil, nil
}

func TestExecJoined(t *testing.T) {
	stmts := []Stmt{{SQL: "A ?", Args: []any{1}}, {SQL: "B ?, ?", Args: []any{"x", []byte("y")}}, {SQL: "C"}}
	// One round trip with MultiStatements, the arguments in order.
	r := &recorder{}
	if _, err := (&Conn{MultiStatements: true}).ExecJoined(context.Background(), r, stmts); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.queries, []string{"A ?;\nB ?, ?;\nC"}) || !slices.Equal(r.nargs, []int{3}) {
		t.Fatalf("joined: %q %v", r.queries, r.nargs)
	}
	// One each without.
	r = &recorder{}
	if _, err := (&Conn{}).ExecJoined(context.Background(), r, stmts); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.queries, []string{"A ?", "B ?, ?", "C"}) {
		t.Fatalf("not joined: %q", r.queries)
	}
	// A failure stops the rest.
	r = &recorder{fail: "B"}
	if _, err := (&Conn{}).ExecJoined(context.Background(), r, stmts); err == nil || len(r.queries) != 2 {
		t.Fatalf("after a failure: %v, sent %q", err, r.queries)
	}
	// Joined Execs stay under joinedBytes: large statements split.
	big := Stmt{SQL: "D ?", Args: []any{strings.Repeat("z", joinedBytes/5)}}
	r = &recorder{}
	if _, err := (&Conn{MultiStatements: true}).ExecJoined(context.Background(), r, slices.Repeat([]Stmt{big}, 5)); err != nil {
		t.Fatal(err)
	}
	if len(r.queries) != 3 || !slices.Equal(r.nargs, []int{2, 2, 1}) {
		t.Fatalf("5 statements of a fifth of the bound each (escaped: two fifths) sent as %v arguments per Exec, want 2, 2, 1", r.nargs)
	}
}
