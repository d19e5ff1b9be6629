package strictjson

import "testing"

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{`{"level":"info","msg":"x","idc":1}`, true},
		{`{"a":{"b":1},"c":[{"b":2},{"b":3}]}`, true},
		{`{"level":"info","idc":1,"msg":"x","idc":1}`, false},
		{`{"a":{"b":1,"b":2}}`, false},
		{`{"a":[{"b":1,"b":2}]}`, false},
		{`{"a":1}{"b":2}`, false},
		{`{"a":1`, false},
		{`[1,2]`, false},
		{`2026-01-01 INFO console line`, false},
	} {
		err := Check(tc.line)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%s) = %v, want ok %v", tc.line, err, tc.ok)
		}
	}
}
