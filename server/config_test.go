package server

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func noEnv(string) string { return "" }

// TestHelpAndVersionExitZero: --help prints the flags to stdout and
// --version the version; both end the start without an error (exit 0).
func TestHelpAndVersionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--version"}} {
		var out, errOut bytes.Buffer
		_, err := loadConfig(args, noEnv, &out, &errOut)
		if !errors.Is(err, errHelp) {
			t.Errorf("%v: %v, want errHelp", args, err)
		}
		if errOut.Len() != 0 {
			t.Errorf("%v wrote to stderr: %s", args, errOut.String())
		}
		want := "--zk"
		if args[0] == "--version" {
			want = "idgen " + version
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("%v: stdout %q does not contain %q", args, out.String(), want)
		}
	}
}

// TestUnknownEnvironmentVariables: a misspelt IDGEN_* variable is reported;
// known ones and the test harness's are not.
func TestUnknownEnvironmentVariables(t *testing.T) {
	got := unknownEnv([]string{"IDGEN_MSYQL=x", "IDGEN_MYSQL=dsn", "IDGEN_ZK=h:1", "IDGEN_CONFIG=f", "IDGEN_TEST_ZK=h:2",
		"IDGEN_MEASURE=1", "HOME=/root", "IDGEN_ADMIN_TOKEN=t", "IDGEN_NODEBITS=8"})
	if want := []string{"IDGEN_MSYQL", "IDGEN_NODEBITS"}; !slices.Equal(got, want) {
		t.Fatalf("unknownEnv = %v, want %v", got, want)
	}
}

// TestConfigRefusals: configurations that could repeat IDs or cannot be
// served are refused at start, naming the setting (issue 9).
func TestConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--zk", "h:1", "--node", "3"}, "node"},
		{[]string{"--mysql", "u@tcp(h:1)/d", "--node", "3"}, "node"},
		{[]string{"--max-batch", "20000"}, "max_batch"},
		{[]string{"--zk", "h:1", "--heartbeat-interval", "20s", "--zk-session-timeout", "10s"}, "heartbeat_interval"},
		{[]string{"--outage-tolerance", "-1s"}, "outage_tolerance"},
	} {
		var out, errOut bytes.Buffer
		_, err := loadConfig(tc.args, noEnv, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a refusal naming %s", tc.args, err, tc.want)
		}
	}
	if _, err := loadConfig([]string{"--node", "3"}, noEnv, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Errorf("standalone --node 3: %v", err)
	}
}

// TestBoolFlagsWithoutValue: a bool flag given without a value means true
// and does not swallow the next argument.
func TestBoolFlagsWithoutValue(t *testing.T) {
	cfg, err := loadConfig([]string{"--mysql-accept-unsafe-durability", "--allow-cached-slot=false", "--rpc-addr", ":9"}, noEnv,
		&bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.MySQLAcceptUnsafe || cfg.AllowCachedSlot || cfg.RPCAddr != ":9" {
		t.Fatalf("accept-unsafe %v, allow-cached-slot %v, rpc-addr %q", cfg.MySQLAcceptUnsafe, cfg.AllowCachedSlot, cfg.RPCAddr)
	}
}
