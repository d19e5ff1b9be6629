package harness

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestGTIDSeq(t *testing.T) {
	for pos, want := range map[string]int64{"": 0, "0-1-1234": 1234, "1-3-7,0-2-40": 40, "1-3-7": 0, "0-1-x": 0, " 0-2-5": 5} {
		if got := GTIDSeq(pos); got != want {
			t.Errorf("GTIDSeq(%q) = %d, want %d", pos, got, want)
		}
	}
}

func TestGaleraFlags(t *testing.T) {
	f := strings.Join(GaleraFlags("c", 1, []int{1, 2, 3}, []int{4, 5, 6}, []int{7, 8, 9}), " ")
	for _, want := range []string{"--wsrep-cluster-address=gcomm://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
		"--wsrep-node-address=127.0.0.1:2", "gmcast.listen_addr=tcp://127.0.0.1:2;ist.recv_addr=127.0.0.1:5",
		"--wsrep-sst-receive-address=127.0.0.1:8", "--wsrep-cluster-name=c"} {
		if !strings.Contains(f, want) {
			t.Errorf("flags %q lack %q", f, want)
		}
	}
}

// echo serves one line-echo listener answering prefix+line.
func echo(t *testing.T, prefix string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 64)
				for {
					n, err := c.Read(b)
					if err != nil {
						return
					}
					if _, err := c.Write(append([]byte(prefix), b[:n]...)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	b := make([]byte, 64)
	n, err := io.ReadAtLeast(c, b, 1)
	return string(b[:n]), err
}

// TestTCPProxy: bytes pass unframed, a partition holds them, SwitchTarget
// breaks existing connections and sends new ones to the new target.
func TestTCPProxy(t *testing.T) {
	a, b := echo(t, "a:"), echo(t, "b:")
	p, err := NewTCPProxy(a)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "x", 2*time.Second); err != nil || got != "a:x" {
		t.Fatalf("before: %q, %v", got, err)
	}
	p.Partition()
	if got, err := roundTrip(c, "y", 300*time.Millisecond); err == nil {
		t.Fatalf("partitioned: got %q", got)
	}
	p.Heal()
	p.SwitchTarget(b)
	if p.Target() != b {
		t.Fatalf("target %s, want %s", p.Target(), b)
	}
	if got, err := roundTrip(c, "z", 2*time.Second); err == nil && got != "" {
		t.Fatalf("old connection still forwarded after the switch: %q", got)
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(c2, "w", 2*time.Second); err != nil || got != "b:w" {
		t.Fatalf("after the switch: %q, %v", got, err)
	}
	// A switch with a live connection closes it at once.
	p.SwitchTarget(a)
	if _, err := roundTrip(c2, "v", 2*time.Second); err == nil {
		t.Fatal("connection survived the switch")
	}
}
