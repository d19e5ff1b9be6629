package segment

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Format is how a business's numbers are handed out.
type Format int8

// Formats.
const (
	// FormatInt: 64-bit integers (ranges when not obfuscated).
	FormatInt Format = 0
	// FormatCode: short strings in Crockford's base32 (issuer/obfuscate).
	FormatCode Format = 1
)

// String returns the name used in config and CLI.
func (f Format) String() string {
	switch f {
	case FormatInt:
		return "int"
	case FormatCode:
		return "code"
	}
	return "unknown"
}

// ParseFormat reads "int" or "code".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "int", "":
		return FormatInt, nil
	case "code":
		return FormatCode, nil
	}
	return 0, fmt.Errorf("%w: format %q: want int or code", ErrInvalid, s)
}

// Limits of the output settings.
const (
	// KeySize is the size of a business's secret key.
	KeySize = 16
	// WrappedKeySize is the size of a key wrapped by a master key: a
	// version byte, a 12-byte nonce, the sealed key and a 16-byte tag
	// (AES-256-GCM, issuer/keywrap).
	WrappedKeySize = 1 + 12 + KeySize + 16
	// MaxCodeMinLength is the largest code_min_length (13 base32
	// characters hold every number below 2^63).
	MaxCodeMinLength = 13
	// MaxPlugins is the most plugins one business may enable.
	MaxPlugins = 8
	// MaxPluginNameLen is the longest plugin name.
	MaxPluginNameLen = 32
)

// ErrOutputLocked: a business's output settings (obfuscate, format,
// code_min_length) cannot change once it has issued: old and new outputs
// could collide.
var ErrOutputLocked = errors.New("output settings locked")

// SecretKey is a business's obfuscation key. It prints and marshals as
// "[redacted]" so that logging a Biz never leaks it; stores persist the
// bytes explicitly.
type SecretKey []byte

// String implements fmt.Stringer.
func (SecretKey) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer.
func (SecretKey) GoString() string { return "[redacted]" }

// MarshalJSON implements json.Marshaler.
func (SecretKey) MarshalJSON() ([]byte, error) { return json.Marshal("[redacted]") }

// NewSecretKey returns a fresh random key.
func NewSecretKey() SecretKey {
	k := make([]byte, KeySize)
	_, _ = rand.Read(k) // crypto/rand.Read never fails (Go 1.24+)
	return k
}

// PlainOutput reports whether b hands out plain integer ranges.
func (b Biz) PlainOutput() bool { return !b.Obfuscate && b.Format == FormatInt }

func validateOutput(b Biz) error {
	switch {
	case b.Format != FormatInt && b.Format != FormatCode:
		return fmt.Errorf("%w: biz %q: format %d: want 0 (int) or 1 (code)", ErrInvalid, b.Name, b.Format)
	case b.CodeMinLength < 0 || b.CodeMinLength > MaxCodeMinLength:
		return fmt.Errorf("%w: biz %q: code_min_length %d out of range 0..%d", ErrInvalid, b.Name, b.CodeMinLength, MaxCodeMinLength)
	case b.Key != nil && len(b.Key) != KeySize && len(b.Key) != WrappedKeySize:
		return fmt.Errorf("%w: biz %q: secret key is %d bytes, want %d (plain) or %d (wrapped by a master key)",
			ErrInvalid, b.Name, len(b.Key), KeySize, WrappedKeySize)
	case len(b.Plugins) > MaxPlugins:
		return fmt.Errorf("%w: biz %q: %d plugins, at most %d", ErrInvalid, b.Name, len(b.Plugins), MaxPlugins)
	}
	seen := map[string]bool{}
	for _, p := range b.Plugins {
		if err := validatePluginName(p); err != nil {
			return fmt.Errorf("%w: biz %q: %v", ErrInvalid, b.Name, err)
		}
		if seen[p] {
			return fmt.Errorf("%w: biz %q: plugin %q listed twice", ErrInvalid, b.Name, p)
		}
		seen[p] = true
	}
	return nil
}

func validatePluginName(p string) error {
	if p == "" || len(p) > MaxPluginNameLen {
		return fmt.Errorf("plugin name %q: want 1..%d characters", p, MaxPluginNameLen)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("plugin name %q: want [a-z0-9_.-]", p)
		}
	}
	return nil
}

// applyOutputUpdate applies the output fields of u, refusing a change of
// obfuscate, format or code_min_length once the business has issued.
func applyOutputUpdate(b Biz, u BizUpdate) (Biz, error) {
	changed := u.Obfuscate != nil && *u.Obfuscate != b.Obfuscate ||
		u.Format != nil && *u.Format != b.Format ||
		u.CodeMinLength != nil && *u.CodeMinLength != b.CodeMinLength
	if changed && b.Issued {
		return Biz{}, fmt.Errorf("%w: biz %q has already issued numbers, so obfuscate, format and code_min_length can no longer change (old and new outputs could collide): create a new business instead",
			ErrOutputLocked, b.Name)
	}
	if u.Obfuscate != nil {
		b.Obfuscate = *u.Obfuscate
	}
	if u.Format != nil {
		b.Format = *u.Format
	}
	if u.CodeMinLength != nil {
		b.CodeMinLength = *u.CodeMinLength
	}
	if u.Plugins != nil {
		b.Plugins = append([]string(nil), (*u.Plugins)...)
	}
	if u.Issued != nil {
		if !*u.Issued && b.Issued {
			return Biz{}, fmt.Errorf("%w: biz %q: issued cannot be cleared", ErrInvalid, b.Name)
		}
		b.Issued = *u.Issued
	}
	if u.Key != nil {
		// Checked here as well as by validateOutput: an empty key would
		// otherwise pass as "none" and be replaced by a fresh one below,
		// silently changing the outputs of an obfuscated business.
		if len(u.Key) != KeySize && len(u.Key) != WrappedKeySize {
			return Biz{}, fmt.Errorf("%w: biz %q: new secret key is %d bytes, want %d (plain) or %d (wrapped by a master key)",
				ErrInvalid, b.Name, len(u.Key), KeySize, WrappedKeySize)
		}
		b.Key = slices.Clone(u.Key)
	}
	if len(b.Key) == 0 {
		// Businesses created before keys existed get one on their first
		// update (before issuing, so before any output depends on it).
		b.Key = NewSecretKey()
	}
	return b, nil
}

// StoredIssued is the Issued flag of a business as a store reads it back.
// A business stored before output settings existed has no key and may have
// issued numbers already: it counts as issued, so its output can no longer
// switch to obfuscation (which could repeat numbers it handed out) and its
// next number needs no store write. Every store applies this rule when it
// decodes a business; MySQL's schema 3 migration sets the flag instead.
func StoredIssued(issued bool, key []byte) bool { return issued || len(key) == 0 }
