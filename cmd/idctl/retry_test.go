package main

import (
	"strings"
	"testing"
)

// Every idctl command retries retryable refusals within --timeout, as
// `idctl get` does (issue 31): a node that refuses CreateBiz three times
// as starting, then serves, gets one successful `biz create`; with fewer
// tries than refusals allowed (a timeout below one pause) the refusal is
// reported as it is.
func TestCommandsRetryRetryableRefusals(t *testing.T) {
	cleanEnv(t)
	t.Setenv("IDGEN_ADMIN_TOKEN", "fake-admin-token-0123456789")
	f := &fakeNode{refuse: 3}
	addr := startFakeNode(t, f)

	code, out, errOut := runCLI(t, "biz", "create", "--addr", addr, "--biz", "starting", "--timeout", "1m")
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the call retried past 3 refusals", code, out, errOut)
	}
	f.mu.Lock()
	calls, left := len(f.creates), f.refuse
	f.mu.Unlock()
	if calls != 4 || left != 0 {
		t.Fatalf("%d CreateBiz calls, %d refusals left; want 4 calls (3 refused, 1 served)", calls, left)
	}

	f.mu.Lock()
	f.refuse = 1
	f.mu.Unlock()
	// 10ms is below the shortest pause (50ms): no second try fits.
	code, _, errOut = runCLI(t, "biz", "create", "--addr", addr, "--biz", "starting", "--timeout", "10ms")
	if code != 1 || !strings.Contains(errOut, "starting") || !strings.Contains(errOut, "retryable") {
		t.Fatalf("exit %d, stderr %q; want the retryable refusal reported", code, errOut)
	}
}
