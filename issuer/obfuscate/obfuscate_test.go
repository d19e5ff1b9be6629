package obfuscate

import (
	"math/bits"
	"slices"
	"strings"
	"testing"
)

var testKey = []byte("0123456789abcdef")

func mustCipher(t testing.TB) *Cipher {
	t.Helper()
	c, err := New(testKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// n10M is 10M inputs, or 1M under -race (the race detector makes the
// 10M run and its sort too slow for CI on 2 cores; the plain run covers 10M).
func n10M() int {
	if raceEnabled {
		return 1_000_000
	}
	return 10_000_000
}

func TestNewKeySize(t *testing.T) {
	for _, n := range []int{0, 15, 17, 32} {
		if _, err := New(make([]byte, n)); err == nil {
			t.Errorf("New(%d bytes) accepted", n)
		}
	}
}

// TestEncodeIDBijection: 10M consecutive inputs give 10M distinct positive
// outputs, each decoding back to its input.
func TestEncodeIDBijection(t *testing.T) {
	c := mustCipher(t)
	n := n10M()
	out := make([]int64, n)
	const start = int64(1) << 40 // a typical snowflake-sized number
	for i := range out {
		in := start + int64(i)
		v := c.EncodeID(in)
		if v < 1 {
			t.Fatalf("EncodeID(%d) = %d, not positive", in, v)
		}
		if i%7 == 0 {
			if back, err := c.DecodeID(v); err != nil || back != in {
				t.Fatalf("DecodeID(EncodeID(%d)) = %d, %v", in, back, err)
			}
		}
		out[i] = v
	}
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			t.Fatalf("collision: %d twice among %d outputs", out[i], n)
		}
	}
}

func TestEncodeIDEdges(t *testing.T) {
	c := mustCipher(t)
	for _, in := range []int64{1, 2, 1<<62 - 1, 1 << 62, 1<<63 - 1} {
		v := c.EncodeID(in)
		if v < 1 {
			t.Fatalf("EncodeID(%d) = %d", in, v)
		}
		if back, err := c.DecodeID(v); err != nil || back != in {
			t.Fatalf("DecodeID(EncodeID(%d)) = %d, %v", in, back, err)
		}
	}
	if _, err := c.DecodeID(0); err == nil {
		t.Fatal("DecodeID(0) accepted")
	}
}

// TestEncodeIDAvalanche measures how many of the 63 bits differ between the
// outputs of neighbouring inputs: about half (31.5) is the goal.
func TestEncodeIDAvalanche(t *testing.T) {
	c := mustCipher(t)
	const n = 200_000
	total := 0
	for i := int64(1); i <= n; i++ {
		total += bits.OnesCount64(uint64(c.EncodeID(i) ^ c.EncodeID(i+1)))
	}
	avg := float64(total) / n
	t.Logf("neighbouring inputs: outputs differ in %.2f of 63 bits on average (%.1f%%)", avg, 100*avg/63)
	if avg < 29 || avg > 34 {
		t.Fatalf("average differing bits %.2f, want about 31.5", avg)
	}
	// Codes of one length: 5 bits per character.
	total = 0
	for i := int64(1 << 20); i < 1<<20+n; i++ {
		a, b := c.permuteWidth(uint64(i), 30), c.permuteWidth(uint64(i+1), 30)
		total += bits.OnesCount64(a ^ b)
	}
	avg = float64(total) / n
	t.Logf("6-character codes: neighbouring values differ in %.2f of 30 bits", avg)
	if avg < 13 || avg > 17 {
		t.Fatalf("code average differing bits %.2f, want about 15", avg)
	}
}

// codeKey turns a code into a sortable key computed without the encoder:
// length in the top bits, base32 digits below.
func codeKey(t *testing.T, s string) uint64 {
	var v uint64
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(Alphabet, s[i])
		if d < 0 {
			t.Fatalf("code %q has %q outside the alphabet", s, s[i])
		}
		v = v<<5 | uint64(d)
	}
	return uint64(len(s))<<56 | v
}

// TestCodesUniqueAcrossLengthBoundary: 10M consecutive numbers straddling
// the 5/6-character boundary (32^5) give 10M distinct codes, each of the
// right length, each decoding back; plain codes too.
func TestCodesUniqueAcrossLengthBoundary(t *testing.T) {
	n := n10M()
	const minLen = 4
	start := int64(1)<<25 - int64(n)/2
	for _, obf := range []bool{true, false} {
		var c *Cipher
		if obf {
			c = mustCipher(t)
		}
		keys := make([]uint64, n)
		var buf []byte
		lens := map[int]int{}
		for i := range keys {
			in := start + int64(i)
			buf = c.AppendCode(buf[:0], in, minLen)
			s := string(buf)
			if len(s) != CodeLen(in, minLen) {
				t.Fatalf("code of %d is %q, want %d characters", in, s, CodeLen(in, minLen))
			}
			lens[len(s)]++
			if i%5 == 0 {
				if back, err := c.DecodeCode(s, minLen); err != nil || back != in {
					t.Fatalf("DecodeCode(%q) = %d, %v, want %d", s, back, err, in)
				}
			}
			keys[i] = codeKey(t, s)
		}
		if lens[5] == 0 || lens[6] == 0 {
			t.Fatalf("lengths %v: the range does not cross the boundary", lens)
		}
		slices.Sort(keys)
		for i := 1; i < len(keys); i++ {
			if keys[i] == keys[i-1] {
				t.Fatalf("obfuscate=%v: two numbers share a code", obf)
			}
		}
		t.Logf("obfuscate=%v: %d distinct codes, lengths %v", obf, n, lens)
	}
}

func TestCodeLengths(t *testing.T) {
	c := mustCipher(t)
	for _, tc := range []struct {
		n      int64
		minLen int
		want   int
	}{{0, 0, 1}, {1, 0, 1}, {31, 0, 1}, {32, 0, 2}, {1, 6, 6}, {1<<30 - 1, 6, 6}, {1 << 30, 6, 7}, {1<<63 - 1, 0, 13}, {1<<63 - 1, 20, 13}} {
		if got := CodeLen(tc.n, tc.minLen); got != tc.want {
			t.Errorf("CodeLen(%d, %d) = %d, want %d", tc.n, tc.minLen, got, tc.want)
		}
		for _, ci := range []*Cipher{nil, c} {
			s := ci.Code(tc.n, tc.minLen)
			if len(s) != tc.want {
				t.Errorf("Code(%d, %d) = %q", tc.n, tc.minLen, s)
			}
			if back, err := ci.DecodeCode(s, tc.minLen); err != nil || back != tc.n {
				t.Errorf("DecodeCode(%q) = %d, %v, want %d", s, back, err, tc.n)
			}
			if back, err := ci.DecodeCode(strings.ToLower(s), tc.minLen); err != nil || back != tc.n {
				t.Errorf("DecodeCode(lower %q) = %d, %v", s, back, err)
			}
		}
	}
}

func TestDecodeCodeRefuses(t *testing.T) {
	c := mustCipher(t)
	for _, s := range []string{"", "U", "AB-C", "ZZZZZZZZZZZZZ", "00000000000000"} {
		if _, err := c.DecodeCode(s, 0); err == nil {
			t.Errorf("DecodeCode(%q) accepted", s)
		}
	}
	// Plain: a padded code beyond the minimum length is not canonical.
	if _, err := (*Cipher)(nil).DecodeCode("001", 1); err == nil {
		t.Error("non-canonical plain code accepted")
	}
	// Crockford reading of look-alikes.
	if n, err := (*Cipher)(nil).DecodeCode("1O", 2); err != nil || n != 32 {
		t.Errorf("DecodeCode(1O) = %d, %v", n, err)
	}
	if n, err := (*Cipher)(nil).DecodeCode("IL", 2); err != nil || n != 33 {
		t.Errorf("DecodeCode(IL) = %d, %v", n, err)
	}
}

var sink int64
var sinkB []byte

func BenchmarkEncodeID(b *testing.B) {
	c := mustCipher(b)
	for i := 0; b.Loop(); i++ {
		sink = c.EncodeID(int64(i) + 1<<40)
	}
}

func BenchmarkCode(b *testing.B) {
	c := mustCipher(b)
	buf := make([]byte, 0, MaxCodeLen)
	for i := 0; b.Loop(); i++ {
		sinkB = c.AppendCode(buf[:0], int64(i)+1<<30, 6)
	}
}

func BenchmarkDecodeID(b *testing.B) {
	c := mustCipher(b)
	for i := 0; b.Loop(); i++ {
		sink, _ = c.DecodeID(int64(i) + 1<<40)
	}
}
