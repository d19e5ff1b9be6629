package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAuditFilters: idctl audit reads a node's audit file and filters by
// business and --since (a duration or an RFC 3339 time); --json prints the
// matching lines; a torn line is skipped with a warning.
func TestAuditFilters(t *testing.T) {
	cleanEnv(t)
	now := time.Now().UTC()
	old := now.Add(-2 * time.Hour).Format(time.RFC3339Nano)
	recent := now.Add(-time.Minute).Format(time.RFC3339Nano)
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	content := `{"time":"` + old + `","biz":"orders","channel":"unordered","served":"unordered","count":3,"ranges":[[1,3]],"caller":"10.0.0.9:4000","served_by":"10.0.0.1:8888","worker":-1}
{"time":"` + recent + `","biz":"orders","channel":"snowflake","served":"unordered","fallback":true,"count":2,"ranges":[[4,5]],"caller":"10.0.0.9:4001","served_by":"10.0.0.1:8888","worker":3}
{"time":"` + recent + `","biz":"users","channel":"snowflake","served":"snowflake","count":1,"ranges":[[77,77]],"worker":3}
{"time":"` + recent + `","biz":"ord
`
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "audit", "--file", file, "--biz", "orders", "--since", "10m")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "4-5") || strings.Contains(out, "1-3") || strings.Contains(out, "users") ||
		!strings.Contains(out, "snowflake->unordered (fallback)") || !strings.Contains(out, "10.0.0.9:4001") {
		t.Fatalf("output:\n%s", out)
	}
	if !strings.Contains(errOut, "1 lines are not audit records") {
		t.Fatalf("stderr: %s", errOut)
	}
	code, out, _ = runCLI(t, "audit", "--file", file, "--since", now.Add(-3*time.Hour).Format(time.RFC3339), "--json")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.HasPrefix(out, `{"time":"`+old) {
		t.Fatalf("--json: exit %d\n%s", code, out)
	}
	if code, _, _ := runCLI(t, "audit", "--file", file, "--since", "yesterday"); code != 2 {
		t.Fatalf("bad --since: exit %d, want 2", code)
	}
	if code, _, errOut := runCLI(t, "audit", "--file", filepath.Join(t.TempDir(), "none")); code != 1 || !strings.Contains(errOut, "--file") {
		t.Fatalf("missing file: exit %d %s", code, errOut)
	}
}
