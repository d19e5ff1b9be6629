package keywrap

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/idgen/idgen/segment"
)

func mustKey(t *testing.T, secret string) *Key {
	t.Helper()
	k, err := New([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const secretA = "0123456789abcdef0123456789abcdef-A"
const secretB = "0123456789abcdef0123456789abcdef-B"

// TestRoundTrip: a wrapped key has the documented size and version, is not
// the plain key, and opens to it; a plain key passes Unwrap unchanged.
func TestRoundTrip(t *testing.T) {
	k := mustKey(t, secretA)
	plain := segment.NewSecretKey()
	w, err := k.Wrap("orders", plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != segment.WrappedKeySize || w[0] != Version || !IsWrapped(w) || IsWrapped(plain) {
		t.Fatalf("wrapped key: %d bytes, version %d", len(w), w[0])
	}
	if bytes.Contains(w, plain) {
		t.Fatal("the wrapped key contains the plain key")
	}
	got, err := k.Unwrap("orders", w)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Unwrap: %x, %v; want %x", got, err, plain)
	}
	w2, _ := k.Wrap("orders", plain)
	if bytes.Equal(w, w2) {
		t.Fatal("two wraps of one key are identical: the nonce is not random")
	}
	if got, err := k.Unwrap("orders", plain); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Unwrap of a plain key: %x, %v", got, err)
	}
	var nilKey *Key
	if got, err := nilKey.Unwrap("orders", plain); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("nil key, plain stored key: %x, %v", got, err)
	}
	if mustKey(t, secretA).ID() != k.ID() || mustKey(t, secretB).ID() == k.ID() || len(k.ID()) != 16 {
		t.Fatalf("key ids: %q", k.ID())
	}
}

// TestRefusals: another master key, another business, a changed byte, no
// master key, and a stored key of the wrong size are refused, each with
// its sentinel and a message naming the business and the fix.
func TestRefusals(t *testing.T) {
	k := mustKey(t, secretA)
	plain := segment.NewSecretKey()
	w, _ := k.Wrap("orders", plain)

	_, err := mustKey(t, secretB).Unwrap("orders", w)
	if !errors.Is(err, ErrWrongMasterKey) || !strings.Contains(err.Error(), `business "orders"`) || !strings.Contains(err.Error(), "--master-key-file") {
		t.Errorf("wrong master key: %v", err)
	}
	if _, err := k.Unwrap("users", w); !errors.Is(err, ErrWrongMasterKey) {
		t.Errorf("key copied to another business: %v, want ErrWrongMasterKey", err)
	}
	for i := range w {
		bad := bytes.Clone(w)
		bad[i] ^= 0x01
		if _, err := k.Unwrap("orders", bad); err == nil {
			t.Errorf("byte %d changed: opened", i)
		}
	}
	var nilKey *Key
	_, err = nilKey.Unwrap("orders", w)
	if !errors.Is(err, ErrNoMasterKey) || !strings.Contains(err.Error(), `business "orders"'s key is wrapped by a master key: start the node with --master-key-file`) {
		t.Errorf("no master key: %v", err)
	}
	if _, err := k.Unwrap("orders", plain[:10]); !errors.Is(err, ErrBadKey) {
		t.Errorf("short stored key: %v, want ErrBadKey", err)
	}
	if _, err := k.Wrap("orders", w); !errors.Is(err, ErrBadKey) {
		t.Errorf("wrapping a wrapped key: %v, want ErrBadKey", err)
	}
	if _, err := New([]byte("short")); err == nil {
		t.Error("New accepted a 5-byte secret")
	}
}

func writeKeyFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "master.key")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is masked by the umask
		t.Fatal(err)
	}
	return p
}

// TestLoad: a 0600 file loads (whitespace trimmed: the same key as New of
// the content); a file readable by group or others, a short file and a
// missing file are refused with the command that fixes them.
func TestLoad(t *testing.T) {
	p := writeKeyFile(t, "\n  "+secretA+"\n", 0o600)
	k, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if k.ID() != mustKey(t, secretA).ID() {
		t.Error("surrounding whitespace is part of the key")
	}
	if runtime.GOOS != "windows" {
		for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
			_, err := Load(writeKeyFile(t, secretA, mode))
			if err == nil || !strings.Contains(err.Error(), "chmod 600") {
				t.Errorf("mode %v: %v, want a refusal naming chmod 600", mode, err)
			}
		}
	}
	_, err = Load(writeKeyFile(t, "  too short  \n", 0o600))
	if err == nil || !strings.Contains(err.Error(), "head -c 48 /dev/urandom | base64 >") || !strings.Contains(err.Error(), "master.key") {
		t.Errorf("short file: %v, want a refusal naming the file and how to make one", err)
	}
	_, err = Load(filepath.Join(t.TempDir(), "absent"))
	if err == nil || !strings.Contains(err.Error(), "head -c 48") {
		t.Errorf("missing file: %v", err)
	}
}
