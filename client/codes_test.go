package client

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// intConsts returns the constants of type typ declared in the Go file at
// path, name to value, with the name's prefix cut off; only constants
// whose name has the prefix and whose value is an integer literal.
func intConsts(t *testing.T, path, typ, prefix string) map[string]int64 {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
				continue
			}
			for i, n := range vs.Names {
				name, ok := strings.CutPrefix(n.Name, prefix)
				if !ok || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.INT {
					t.Fatalf("%s: %s is not an integer literal", path, n.Name)
				}
				v, err := strconv.ParseInt(lit.Value, 0, 64)
				if err != nil {
					t.Fatal(err)
				}
				out[name] = v
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no %s constants found: has the file's layout changed?", path, typ)
	}
	return out
}

// goName is the Go name of an IDL code: UNKNOWN_BIZ is UnknownBiz.
func goName(idlName string) string {
	var b strings.Builder
	for _, w := range strings.Split(strings.ToLower(idlName), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// TestEveryIDLCodeHasASentinel: the codes are read from the generated
// enum (kitex_gen) and the sentinels from codes.go, so a code added to the
// IDL without its sentinel fails here. Each code maps both ways: the
// refusal's code is the sentinel (Code, errors.Is, through wrapping) and
// the sentinel is the IDL's code (value and name).
func TestEveryIDLCodeHasASentinel(t *testing.T) {
	gen := intConsts(t, "../kitex_gen/idgen/idgen.go", "ErrorCode", "ErrorCode_")
	ours := intConsts(t, "codes.go", "ErrorCode", "Err")
	for name, v := range gen {
		want := goName(name)
		got, ok := ours[want]
		switch {
		case !ok:
			t.Errorf("IDL code %s (%d) has no sentinel: add Err%s ErrorCode = %d to client/codes.go, with what it means and whether it is retryable", name, v, want, v)
			continue
		case got != v:
			t.Errorf("Err%s = %d, the IDL's %s is %d", want, got, name, v)
			continue
		}
		c := ErrorCode(v)
		if c.String() != name || idl.ErrorCode(c).String() != name {
			t.Errorf("ErrorCode(%d).String() = %q, want %q", v, c.String(), name)
		}
		if back, err := idl.ErrorCodeFromString(c.String()); err != nil || int64(back) != v {
			t.Errorf("%s does not map back to the IDL's code %d: %v %v", c, v, back, err)
		}
		refusal := &idl.IdgenError{Code: idl.ErrorCode(v), Message: "refused"}
		returned := &Error{Addr: "a:1", Attempts: 1, Err: refusal} // as call returns it
		for what, err := range map[string]error{
			"the refusal":                        refusal,
			"the client's error":                 returned,
			"the client's error, wrapped":        fmt.Errorf("order %d: %w", 7, returned),
			"out of retry budget":                &Error{Addr: "a:1", Attempts: 6, Reason: ErrRetryBudget, Err: refusal},
			"the sentinel, wrapped":              fmt.Errorf("fake: %w", c),
			"the refusal, wrapped by the caller": fmt.Errorf("plain Kitex: %w", refusal),
		} {
			if got := Code(err); got != c {
				t.Errorf("%s: Code(%v) = %v, want %v", what, err, got, c)
			}
		}
		for what, err := range map[string]error{
			"the client's error":          returned,
			"the client's error, wrapped": fmt.Errorf("order %d: %w", 7, returned),
			"the sentinel, wrapped":       fmt.Errorf("fake: %w", c),
		} {
			for other := range gen {
				o := ErrorCode(gen[other])
				if is := errors.Is(err, o); is != (o == c) {
					t.Errorf("%s %v: errors.Is(err, %s) = %v", what, c, other, is)
				}
			}
		}
	}
	for name, v := range ours {
		if n := idl.ErrorCode(v).String(); n == "<UNSET>" || goName(n) != name {
			t.Errorf("Err%s = %d names no IDL code of that name", name, v)
		}
	}
}

// TestCodeOfOtherErrors: errors that are not refusals have no code and
// match no sentinel.
func TestCodeOfOtherErrors(t *testing.T) {
	for _, err := range []error{
		nil, ErrClosed, ErrInvalid, ErrNoNodes, ErrNotPrefetchable, context.Canceled, errRefused, errTimeout,
		&Error{Addr: "a:1", Attempts: 6, Reason: ErrRetryBudget, Err: errRefused},
		&Error{Addr: "a:1", Attempts: 2, Reason: context.DeadlineExceeded},
		errors.New("INVALID_ARGUMENT"),
	} {
		if c := Code(err); c != 0 {
			t.Errorf("Code(%v) = %v, want 0", err, c)
		}
		if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrInternal) {
			t.Errorf("%v matches a refusal sentinel", err)
		}
	}
	if s := ErrorCode(0).String(); s != "ErrorCode(0)" {
		t.Errorf("ErrorCode(0) = %q", s)
	}
	if s := ErrorCode(99).String(); s != "ErrorCode(99)" {
		t.Errorf("ErrorCode(99) = %q", s)
	}
	if got := ErrRateLimited.Error(); got != "idgen: refused: RATE_LIMITED" {
		t.Errorf("ErrRateLimited.Error() = %q", got)
	}
}
