// Package obfuscate maps a business's numbers to IDs and short codes that
// show no visible pattern, with a keyed bijection, so that outputs stay
// unique by construction and an operator holding the key can decode them.
//
// The mapping is a Feistel network whose round function is a keyed 64-bit
// mixer (the splitmix64 finaliser of a half block xor a round key). A
// Feistel network is a permutation whatever its round function, so the
// mapping is a bijection. Integers use an alternating network over exactly
// 63 bits (halves of 32 and 31 bits), cycle-walked past 0 (apply it again
// until the value lands back in the domain), so the domain is exactly
// [1, 2^63): positive int64 in, positive int64 out. Codes of length L use a
// balanced network over 2*ceil(5L/2) bits, cycle-walked into [0, 32^L).
//
// This is obfuscation, not encryption: it hides business volume and the
// order of issuance from casual observers. It is not a vetted cipher; do not
// rely on it to keep a secret from an adversary who can collect many
// (input, output) pairs, and never put business data in an ID expecting the
// mapping to protect it.
//
// # Codes
//
// A code is a number written in Crockford's base32 alphabet
// (0123456789ABCDEFGHJKMNPQRSTVWXYZ): digits and upper-case letters without
// I, L, O and U, so that a code read aloud or copied by hand is not
// ambiguous (no 1/I/L or 0/O confusion, and no accidental words through U).
// Decoding accepts lower case and reads I and L as 1, O as 0.
//
// A number n is written with L characters, the fewest that hold n (n <
// 32^L) but at least the business's minimum length. With obfuscation, the
// L-character value is a keyed permutation of [0, 32^L) applied to n (for L
// = 13, the longest, of [0, 2^63)). Codes of different lengths are
// different strings, and within one length the permutation is a bijection,
// so two numbers never share a code; decoding checks that the number found
// has exactly that length, so each number has one code only.
package obfuscate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// KeySize is the size of a business key in bytes.
const KeySize = 16

// Rounds is the number of Feistel rounds.
const Rounds = 4

// MaxCodeLen is the longest code: 13 characters hold every number below 2^63.
const MaxCodeLen = 13

// Alphabet is Crockford's base32 alphabet.
const Alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ErrInvalid: a value is not an output of this mapping.
var ErrInvalid = errors.New("not a valid obfuscated value")

// Cipher is a keyed mapping. It is immutable and safe for concurrent use.
type Cipher struct {
	rk [Rounds]uint64
}

// New returns the Cipher of key (KeySize bytes).
func New(key []byte) (*Cipher, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("obfuscate: key is %d bytes, want %d", len(key), KeySize)
	}
	a, b := binary.LittleEndian.Uint64(key), binary.LittleEndian.Uint64(key[8:])
	c := &Cipher{}
	for i := range c.rk {
		a += 0x9e3779b97f4a7c15
		c.rk[i] = mix(a ^ bits.RotateLeft64(b, 7*i))
	}
	return c, nil
}

func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// permute is the Feistel network over 2h bits (1 <= h <= 32); tweak
// separates the permutations of different widths.
func (c *Cipher) permute(x uint64, h uint, tweak uint64) uint64 {
	mask := uint64(1)<<h - 1
	l, r := x>>h, x&mask
	for i := 0; i < Rounds; i++ {
		l, r = r, l^(mix(r^c.rk[i]^tweak)>>(64-h))
	}
	return l<<h | r
}

func (c *Cipher) unpermute(x uint64, h uint, tweak uint64) uint64 {
	mask := uint64(1)<<h - 1
	l, r := x>>h, x&mask
	for i := Rounds - 1; i >= 0; i-- {
		l, r = r^(mix(l^c.rk[i]^tweak)>>(64-h)), l
	}
	return l<<h | r
}

const intTweak = 0x5851f42d4c957f2d

// permute63 is an alternating (unbalanced) Feistel network over exactly
// 63 bits: a 32-bit left half and a 31-bit right half, each round updating
// one half from the other. Every round is invertible, so it is a
// permutation of [0, 2^63) with no cycle-walking.
func (c *Cipher) permute63(x uint64) uint64 {
	l, r := x>>31, x&(1<<31-1)
	for i := 0; i < Rounds63; i += 2 {
		l ^= mix(r^c.rk[i%Rounds]^intTweak) >> 32
		r ^= mix(l^c.rk[(i+1)%Rounds]^intTweak) >> 33
	}
	return l<<31 | r
}

func (c *Cipher) unpermute63(x uint64) uint64 {
	l, r := x>>31, x&(1<<31-1)
	for i := Rounds63 - 2; i >= 0; i -= 2 {
		r ^= mix(l^c.rk[(i+1)%Rounds]^intTweak) >> 33
		l ^= mix(r^c.rk[i%Rounds]^intTweak) >> 32
	}
	return l<<31 | r
}

// Rounds63 is the number of half-updates of the 63-bit network (even).
const Rounds63 = 6

// EncodeID maps n in [1, 2^63) to an obfuscated ID in [1, 2^63); it is a
// bijection of that interval (the 63-bit permutation, cycle-walked past
// 0, which is not an ID). n outside it is returned unchanged (callers never
// pass one: issued numbers are positive int64).
func (c *Cipher) EncodeID(n int64) int64 {
	if n < 1 {
		return n
	}
	x := uint64(n)
	for {
		x = c.permute63(x)
		if x != 0 {
			return int64(x)
		}
	}
}

// DecodeID inverts EncodeID.
func (c *Cipher) DecodeID(v int64) (int64, error) {
	if v < 1 {
		return 0, fmt.Errorf("%w: %d is not a positive ID", ErrInvalid, v)
	}
	x := uint64(v)
	for {
		x = c.unpermute63(x)
		if x != 0 {
			return int64(x), nil
		}
	}
}

// CodeLen returns the length of n's code: the fewest base32 characters that
// hold n, at least minLen (clamped to 1..MaxCodeLen).
func CodeLen(n int64, minLen int) int {
	l := (bits.Len64(uint64(n)) + 4) / 5
	l = max(l, minLen, 1)
	return min(l, MaxCodeLen)
}

// width returns the value width in bits of an L-character code.
func width(l int) uint {
	if l == MaxCodeLen {
		return 63
	}
	return uint(5 * l)
}

// permuteWidth is the cycle-walked permutation of [0, 2^w).
func (c *Cipher) permuteWidth(x uint64, w uint) uint64 {
	h := (w + 1) / 2
	tweak := uint64(w) * 0xd6e8feb86659fd93
	for {
		x = c.permute(x, h, tweak)
		if x < 1<<w {
			return x
		}
	}
}

func (c *Cipher) unpermuteWidth(x uint64, w uint) uint64 {
	h := (w + 1) / 2
	tweak := uint64(w) * 0xd6e8feb86659fd93
	for {
		x = c.unpermute(x, h, tweak)
		if x < 1<<w {
			return x
		}
	}
}

// Code returns n's code (n >= 0). With a nil Cipher the code is n itself in
// base32, left-padded with zeros to the length.
func (c *Cipher) Code(n int64, minLen int) string {
	var buf [MaxCodeLen]byte
	return string(c.AppendCode(buf[:0], n, minLen))
}

// AppendCode appends n's code to dst.
func (c *Cipher) AppendCode(dst []byte, n int64, minLen int) []byte {
	l := CodeLen(n, minLen)
	v := uint64(n)
	if c != nil {
		v = c.permuteWidth(v, width(l))
	}
	var buf [MaxCodeLen]byte
	for i := l - 1; i >= 0; i-- {
		buf[i] = Alphabet[v&31]
		v >>= 5
	}
	return append(dst, buf[:l]...)
}

var decodeTable = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(Alphabet); i++ {
		t[Alphabet[i]] = int8(i)
		if c := Alphabet[i]; c >= 'A' && c <= 'Z' {
			t[c+'a'-'A'] = int8(i)
		}
	}
	t['I'], t['i'], t['L'], t['l'] = 1, 1, 1, 1
	t['O'], t['o'] = 0, 0
	return t
}()

// DecodeCode returns the number behind code s, written by Code with the
// same Cipher (nil: plain) and minLen.
func (c *Cipher) DecodeCode(s string, minLen int) (int64, error) {
	l := len(s)
	if l < 1 || l > MaxCodeLen {
		return 0, fmt.Errorf("%w: code %q has %d characters, want 1..%d", ErrInvalid, s, l, MaxCodeLen)
	}
	var v uint64
	for i := 0; i < l; i++ {
		d := decodeTable[s[i]]
		if d < 0 {
			return 0, fmt.Errorf("%w: code %q: character %q is not in the alphabet %s", ErrInvalid, s, s[i], Alphabet)
		}
		if v>>59 != 0 {
			return 0, fmt.Errorf("%w: code %q is too large", ErrInvalid, s)
		}
		v = v<<5 | uint64(d)
	}
	w := width(l)
	if v >= 1<<w {
		return 0, fmt.Errorf("%w: code %q is too large", ErrInvalid, s)
	}
	if c != nil {
		v = c.unpermuteWidth(v, w)
	}
	n := int64(v)
	if CodeLen(n, minLen) != l {
		return 0, fmt.Errorf("%w: code %q is not one this business issues (wrong length for its number)", ErrInvalid, s)
	}
	return n, nil
}
