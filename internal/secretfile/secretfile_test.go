package secretfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCheckRule: private modes pass; any bit for others, group write, and
// group read on a file the process owns (it could chmod it) are refused;
// group read passes only on root's file provisioned to a non-root process:
// in its own non-root group (a Kubernetes Secret volume with fsGroup) or
// in $CREDENTIALS_DIRECTORY (systemd's LoadCredential, an ACL).
func TestCheckRule(t *testing.T) {
	const me, grp = 65532, 65532
	for _, c := range []struct {
		name       string
		perm       fs.FileMode
		uid, gid   int
		euid, egid int
		inCreds    bool
		ok         bool
	}{
		{"0600 own", 0o600, me, grp, me, grp, false, true},
		{"0400 own", 0o400, me, grp, me, grp, false, true},
		{"0400 root's", 0o400, 0, 0, me, grp, false, true},
		{"0644 own", 0o644, me, grp, me, grp, false, false},
		{"0640 own", 0o640, me, grp, me, grp, false, false},
		{"0604 own", 0o604, me, grp, me, grp, false, false},
		{"0660 own", 0o660, me, grp, me, grp, false, false},
		{"0440 root's, our group (Kubernetes fsGroup)", 0o440, 0, grp, me, grp, false, true},
		{"0640 root's, our group", 0o640, 0, grp, me, grp, false, true},
		{"0460 root's, our group: group write", 0o460, 0, grp, me, grp, false, false},
		{"0444 root's, our group: others read", 0o444, 0, grp, me, grp, false, false},
		{"0440 root's, another group", 0o440, 0, 100, me, grp, false, false},
		{"0440 root's, group root", 0o440, 0, 0, me, 0, false, false},
		{"0440 root's, read by root", 0o440, 0, 0, 0, 0, false, false},
		{"0440 someone else's, our group", 0o440, 1000, grp, me, grp, false, false},
		{"0440 root's, group root, in $CREDENTIALS_DIRECTORY (systemd's ACL)", 0o440, 0, 0, me, grp, true, true},
		{"0444 root's, in $CREDENTIALS_DIRECTORY", 0o444, 0, 0, me, grp, true, false},
		{"0440 our own, in $CREDENTIALS_DIRECTORY", 0o440, me, grp, me, grp, true, false},
	} {
		err := check("/s", c.perm, c.uid, c.gid, true, c.euid, c.egid, c.inCreds)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "chmod 600 /s") {
			t.Errorf("%s: %v does not name the chmod", c.name, err)
		}
	}
	if err := check("/s", 0o440, 0, grp, false, me, grp, true); err == nil {
		t.Error("group read passed with the owner unknown")
	}
}

// TestRead reads real files: a 0600 file (and a symlink to it, the shape
// of a Kubernetes Secret volume) is read; 0644, 0640 and 0604 files of
// the test's own user, and a directory, are refused.
func TestRead(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	dir := t.TempDir()
	write := func(name string, mode fs.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile's mode is masked by the umask
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok", 0o600)
	if b, err := Read(ok); err != nil || string(b) != "secret\n" {
		t.Fatalf("0600: %q, %v", b, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(link); err != nil {
		t.Errorf("symlink to a 0600 file: %v", err)
	}
	for _, mode := range []fs.FileMode{0o644, 0o640, 0o604} {
		p := write("m"+mode.String(), mode)
		if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("mode %04o: %v, want a refusal naming chmod 600", mode, err)
		}
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
}

// TestReadString: a one-line secret is trimmed; an empty or blank file is
// refused naming it; Read's rule still applies.
func TestReadString(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode fs.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if v, err := ReadString(write("tok", " user:pw \n", 0o600)); err != nil || v != "user:pw" {
		t.Fatalf("got %q, %v; want user:pw", v, err)
	}
	for _, content := range []string{"", " \n\t\n"} {
		p := write("blank", content, 0o600)
		if _, err := ReadString(p); err == nil || !strings.Contains(err.Error(), p+" is empty") {
			t.Errorf("content %q: %v, want a refusal naming the file", content, err)
		}
	}
	if runtime.GOOS != "windows" {
		p := write("open", "tok\n", 0o644)
		if _, err := ReadString(p); err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("mode 0644: %v, want a refusal naming chmod 600", err)
		}
		// The unchecked form (idctl's) takes it, and keeps the rest.
		if v, err := ReadStringUnchecked(p); err != nil || v != "tok" {
			t.Errorf("unchecked, mode 0644: %q, %v; want tok", v, err)
		}
	}
	if _, err := ReadStringUnchecked(write("blank2", " \n", 0o644)); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("unchecked, blank: %v, want a refusal", err)
	}
}

// TestFill: the file fills an empty value; no file leaves the value as it
// is; both forms are refused naming both settings; a file that cannot be
// read is an error naming the file setting.
func TestFill(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v := ""
	if err := Fill(&v, p, "Token", "TokenFile"); err != nil || v != "tok" {
		t.Fatalf("Fill: %q, %v", v, err)
	}
	v = "given"
	if err := Fill(&v, "", "Token", "TokenFile"); err != nil || v != "given" {
		t.Fatalf("no file: %q, %v", v, err)
	}
	if err := Fill(&v, p, "Token", "TokenFile"); err == nil || !strings.Contains(err.Error(), "Token and TokenFile are both set: keep only TokenFile") {
		t.Errorf("both forms: %v", err)
	}
	v = ""
	if err := Fill(&v, p+".missing", "Token", "TokenFile"); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "TokenFile: ") || v != "" {
		t.Errorf("missing file: %q, %v", v, err)
	}
}
