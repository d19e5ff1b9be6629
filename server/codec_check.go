package server

import (
	"encoding/binary"
	"fmt"
)

// The check below walks one request the way the generated decoder will,
// without building anything, and refuses it if any length it declares
// (method name, string, binary, list, set or map size) asks for more than
// the bytes left in its frame, or if it nests deeper than maxNesting, or if
// the frame itself is over max_frame_bytes on any transport. Only then does
// Kitex's codec decode it. Why a pass of our own: the generated FastRead
// code (kitex_gen, gopkg v0.2.0) runs make([]T, 0, size) with the size
// read from the wire, and gopkg's BufferReader reads the method name into
// a buffer of the declared length; neither Kitex v0.16.3's FastCodec
// options nor frugal v0.3.1 (whose list and map decoders also size their
// allocations from the wire) bound them by the bytes that are there.
//
// What the walk costs is one read over bytes that are already buffered
// (no allocation), small next to decoding them.

// maxNesting is the deepest nesting of structs and containers accepted:
// gopkg's skip decoder uses the same 64, and idgen's IDL nests 4 deep.
const maxNesting = 64

// Thrift binary protocol constants (the wire format, not an API).
const (
	thriftVersionMask = 0xffff0000
	thriftVersion1    = 0x80010000
	ttheaderMagic     = 0x10000000 // TTHeader: bytes 4-5 are 0x1000
	ttheaderMetaSize  = 14         // length, magic, flags, seq id, header size

	tSTOP   = 0
	tBOOL   = 2
	tBYTE   = 3
	tDOUBLE = 4
	tI16    = 6
	tI32    = 8
	tI64    = 10
	tSTRING = 11
	tSTRUCT = 12
	tMAP    = 13
	tSET    = 14
	tLIST   = 15
)

// frameCheckErr says why a request was refused before decoding; reason is
// the metric label, a word from a fixed set.
type frameCheckErr struct {
	reason string
	msg    string
}

func (e *frameCheckErr) Error() string { return e.msg }

// Reasons (the idgen_rpc_frames_rejected_total label).
const (
	rejectTooLarge  = "frame_too_large" // the frame (or an unframed message) is over max_frame_bytes
	rejectDeclared  = "declared_length" // a length or size asks for more than the frame holds
	rejectNesting   = "nesting"         // deeper than maxNesting
	rejectMalformed = "malformed"       // not a well-formed Thrift binary message
	rejectProtocol  = "protocol"        // not Thrift binary over TTHeader, framed or buffered transport
)

func refuse(reason, format string, args ...any) error {
	return &frameCheckErr{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// peeker is what the check reads from: remote.ByteBuffer's Peek, which
// returns the first n unread bytes (waiting for them) without consuming
// them, so Kitex's codec decodes the same bytes afterwards.
type peeker interface {
	Peek(n int) ([]byte, error)
}

// walker reads a Thrift binary message between pos and end from the part
// of the stream peeked so far (buf). buf grows only as the walk needs
// bytes, and never past limit: the declared frame end (framed, TTHeader)
// or max_frame_bytes (buffered, which declares no length). In a frame of
// known length it grows by doubling (from 4 KiB), so a large frame takes
// few peeks and memory follows the bytes actually received; without one
// it peeks exactly what the walk needs, since asking for a byte past the
// message would wait for a byte the client never sends.
type walker struct {
	in       peeker
	buf      []byte
	limit    int
	known    bool // limit is a declared frame end, not max_frame_bytes
	max      int  // max_frame_bytes
	pos, end int
}

const windowFloor = 4096

// need makes k.buf hold at least end bytes.
func (k *walker) need(end int) error {
	if end <= len(k.buf) {
		return nil
	}
	if end > k.limit {
		return k.overrun(end - k.pos)
	}
	n := end
	if k.known {
		n = min(max(end, 2*len(k.buf), windowFloor), k.limit)
	}
	b, err := k.in.Peek(n)
	if err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	if len(b) < n {
		return fmt.Errorf("reading the request: short peek (%d of %d bytes)", len(b), n)
	}
	k.buf = b
	return nil
}

// overrun is the refusal of n bytes that do not fit before k.end.
func (k *walker) overrun(n int) error {
	if !k.known { // buffered: bounded by max_frame_bytes alone
		return refuse(rejectTooLarge, "an unframed request longer than max_frame_bytes (%d)", k.max)
	}
	return refuse(rejectDeclared, "the request declares %d bytes where %d are left in its frame", n, k.end-k.pos)
}

// take returns the next n bytes, refusing any n the frame cannot hold
// before reading anything.
func (k *walker) take(n int) ([]byte, error) {
	if n > k.end-k.pos {
		return nil, k.overrun(n)
	}
	if err := k.need(k.pos + n); err != nil {
		return nil, err
	}
	b := k.buf[k.pos : k.pos+n]
	k.pos += n
	return b, nil
}

func (k *walker) i32() (int32, error) {
	b, err := k.take(4)
	if err != nil {
		return 0, err
	}
	return int32(binary.BigEndian.Uint32(b)), nil
}

// length reads a declared length or element count and checks that count
// elements of at least unit bytes each fit in what is left of the frame.
func (k *walker) length(what string, unit int) (int, error) {
	n, err := k.i32()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, refuse(rejectMalformed, "negative %s length %d", what, n)
	}
	if left := k.end - k.pos; int64(n)*int64(unit) > int64(left) {
		if !k.known { // buffered: bounded by max_frame_bytes alone
			return 0, refuse(rejectTooLarge, "a %s of %d declared in an unframed request, more than max_frame_bytes (%d) holds", what, n, k.max)
		}
		return 0, refuse(rejectDeclared, "a %s of %d declared where %d bytes are left in the frame", what, n, left)
	}
	return int(n), nil
}

// fixedSize is the encoded size of a fixed-size type, 0 for others.
func fixedSize(t byte) int {
	switch t {
	case tBOOL, tBYTE:
		return 1
	case tI16:
		return 2
	case tI32:
		return 4
	case tDOUBLE, tI64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes a value of type t takes, 0 for an unknown
// type: what a declared element count is multiplied by.
func minSize(t byte) int {
	if n := fixedSize(t); n > 0 {
		return n
	}
	switch t {
	case tSTRING:
		return 4
	case tSTRUCT:
		return 1 // its stop byte
	case tMAP:
		return 6
	case tSET, tLIST:
		return 5
	}
	return 0
}

// message walks a whole message: the header (version, method name, seq
// id) and the arguments struct.
func (k *walker) message() error {
	v, err := k.i32()
	if err != nil {
		return err
	}
	if uint32(v)&thriftVersionMask != thriftVersion1 {
		return refuse(rejectProtocol, "not a strict Thrift binary message (version word %#x)", uint32(v))
	}
	n, err := k.length("method name", 1)
	if err != nil {
		return err
	}
	if _, err := k.take(n); err != nil {
		return err
	}
	if _, err := k.take(4); err != nil { // seq id
		return err
	}
	return k.structure(maxNesting)
}

func (k *walker) structure(depth int) error {
	if depth == 0 {
		return refuse(rejectNesting, "the request nests deeper than %d", maxNesting)
	}
	for {
		b, err := k.take(1)
		if err != nil {
			return err
		}
		if b[0] == tSTOP {
			return nil
		}
		if _, err := k.take(2); err != nil { // field id
			return err
		}
		if err := k.value(b[0], depth-1); err != nil {
			return err
		}
	}
}

func (k *walker) value(t byte, depth int) error {
	if n := fixedSize(t); n > 0 {
		_, err := k.take(n)
		return err
	}
	switch t {
	case tSTRING:
		n, err := k.length("string", 1)
		if err != nil {
			return err
		}
		_, err = k.take(n)
		return err
	case tSTRUCT:
		return k.structure(depth)
	case tLIST, tSET:
		if depth == 0 {
			return refuse(rejectNesting, "the request nests deeper than %d", maxNesting)
		}
		b, err := k.take(1)
		if err != nil {
			return err
		}
		et := b[0]
		unit := minSize(et)
		if unit == 0 {
			return refuse(rejectMalformed, "a list or set of unknown element type %d", et)
		}
		n, err := k.length("list or set", unit)
		if err != nil {
			return err
		}
		return k.elements(n, et, 0, depth-1)
	case tMAP:
		if depth == 0 {
			return refuse(rejectNesting, "the request nests deeper than %d", maxNesting)
		}
		b, err := k.take(2)
		if err != nil {
			return err
		}
		kt, vt := b[0], b[1]
		ku, vu := minSize(kt), minSize(vt)
		// Some writers leave the types of an empty map zero.
		n, err := k.length("map", max(ku+vu, 1))
		if err != nil {
			return err
		}
		if n > 0 && (ku == 0 || vu == 0) {
			return refuse(rejectMalformed, "a map of unknown key or value type (%d, %d)", kt, vt)
		}
		return k.elements(n, kt, vt, depth-1)
	}
	return refuse(rejectMalformed, "unknown Thrift type %d", t)
}

// elements walks n list elements of type a, or n map entries of key type
// a and value type b (b != 0). n is already checked against the bytes
// left, and each element takes at least one byte, so the loop is bounded
// by the frame.
func (k *walker) elements(n int, a, b byte, depth int) error {
	fa, fb := fixedSize(a), fixedSize(b)
	if fa > 0 && (b == 0 || fb > 0) {
		_, err := k.take(n * (fa + fb))
		return err
	}
	for range n {
		if err := k.value(a, depth); err != nil {
			return err
		}
		if b != 0 {
			if err := k.value(b, depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRequest reads the request at the head of in (without consuming it)
// and returns a *frameCheckErr if it must not be decoded, or the error of
// reading it. It accepts what idgen's clients send: Thrift binary over
// TTHeader (with or without an inner frame), framed or buffered
// transport. Anything else (Kitex protobuf, a mesh header, HTTP, noise) is
// refused here, where Kitex would refuse most of it a little later.
func checkRequest(in peeker, maxFrame int) error {
	head, err := in.Peek(8)
	if err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	first, second := binary.BigEndian.Uint32(head), binary.BigEndian.Uint32(head[4:])
	k := walker{in: in, max: maxFrame}
	switch {
	case second&thriftVersionMask == ttheaderMagic:
		if err := k.frame(first); err != nil {
			return err
		}
		k.pos = ttheaderMetaSize - 2
		b, err := k.take(2)
		if err != nil {
			return err
		}
		// The header's own contents (transforms, key-values) are read by
		// gopkg's ttheader.Decode, which checks them against this size;
		// 14 + size*4 must fit in the frame.
		if _, err := k.take(int(binary.BigEndian.Uint16(b)) * 4); err != nil {
			return err
		}
		if err := k.need(k.pos + 8); err != nil {
			return err
		}
		if binary.BigEndian.Uint32(k.buf[k.pos+4:])&thriftVersionMask == thriftVersion1 {
			// TTHeaderFramed: an inner frame length, within the outer one.
			n, err := k.length("inner frame", 1)
			if err != nil {
				return err
			}
			k.end = k.pos + n
		}
		return k.message()
	case second&thriftVersionMask == thriftVersion1:
		if err := k.frame(first); err != nil {
			return err
		}
		k.pos = 4
		return k.message()
	case first&thriftVersionMask == thriftVersion1:
		k.limit, k.end = maxFrame, maxFrame
		return k.message()
	}
	return refuse(rejectProtocol, "not Thrift binary over TTHeader, framed or buffered transport (first bytes %#08x %#08x)", first, second)
}

// frame sets k's limit to a frame whose first word declares its length
// (not counting the word itself).
func (k *walker) frame(declared uint32) error {
	if int64(declared)+4 > int64(k.max) {
		return refuse(rejectTooLarge, "a frame of %d bytes, over max_frame_bytes (%d)", int64(declared)+4, k.max)
	}
	k.limit, k.end, k.known = int(declared)+4, int(declared)+4, true
	return nil
}
