// Package keywrap wraps businesses' obfuscation keys with a master key that
// lives only on the nodes (a file, --master-key-file), so that the stores
// (MySQL, ZooKeeper, their backups and anyone with read access to them)
// never hold a usable key: without the master key a stored key says nothing
// about the mapping between numbers and the IDs or codes handed out.
//
// A wrapped key is segment.WrappedKeySize bytes: a version byte (1), a
// 12-byte random nonce and the AES-256-GCM seal of the segment.KeySize-byte
// key, with the business's name as additional data, so a wrapped key copied
// to another business does not open there. The AES key is derived from the
// master key file with HKDF-SHA256, so the file may hold any high-entropy
// text (such as base64 of random bytes) rather than exactly 32 raw bytes.
//
// Plain keys (segment.KeySize bytes) are still accepted by Unwrap: stores
// written before master keys existed hold them until the issuer wraps them
// (issuer.WrapKeys, run at node start).
package keywrap

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"

	"github.com/idgen/idgen/internal/secretfile"
	"github.com/idgen/idgen/segment"
)

// MinSecretLen is the shortest master key file content (after trimming
// surrounding whitespace). 32 bytes of base64 text carry 192 bits.
const MinSecretLen = 32

// Version is the first byte of a wrapped key.
const Version = 1

const (
	nonceSize = 12
	// info separates this use of the master key from any other (HKDF).
	info = "idgen keywrap v1: business obfuscation keys"
	// idInfo derives the public key id (see Key.ID).
	idInfo = "idgen keywrap v1: key id"
)

// Errors, wrapped with the business concerned; test them with errors.Is.
var (
	// ErrNoMasterKey: a stored key is wrapped but this node has no master
	// key. The fix is on the node: start it with --master-key-file.
	ErrNoMasterKey = errors.New("no master key")
	// ErrWrongMasterKey: the master key does not open a stored key (another
	// cluster's master key, a key copied between businesses, or damage).
	ErrWrongMasterKey = errors.New("master key does not open the stored key")
	// ErrBadKey: the stored key has neither the plain nor the wrapped size.
	ErrBadKey = errors.New("stored key has an invalid size")
)

// Key is a loaded master key. It is safe for concurrent use. A nil *Key is
// valid for Unwrap: it returns plain keys and refuses wrapped ones.
type Key struct {
	aead cipher.AEAD
	id   string
}

// Load reads the master key file at path. The file must be readable by its
// owner only (mode 0600 or stricter; internal/secretfile has the one
// exception, Kubernetes Secret volumes): a master key that every local
// user can read protects nothing.
func Load(path string) (*Key, error) {
	// The rule of every secret file (internal/secretfile): owner only,
	// or root's file for this process's own group (Kubernetes fsGroup).
	data, err := secretfile.Read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("keywrap: master key file %s does not exist: make one with: head -c 48 /dev/urandom | base64 > %s; chmod 600 %s", path, path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("keywrap: master key file: %w", err)
	}
	secret := bytes.TrimSpace(data)
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("keywrap: master key file %s holds %d bytes, at least %d needed: make one with: head -c 48 /dev/urandom | base64 > %s; chmod 600 %s",
			path, len(secret), MinSecretLen, path, path)
	}
	return New(secret)
}

// New returns the master key derived from secret (at least MinSecretLen
// bytes of high-entropy material; Load reads it from a file).
func New(secret []byte) (*Key, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("keywrap: master key is %d bytes, at least %d needed", len(secret), MinSecretLen)
	}
	k, err := hkdf.Key(sha256.New, secret, nil, info, 32)
	if err != nil {
		return nil, fmt.Errorf("keywrap: derive the master key: %w", err)
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, fmt.Errorf("keywrap: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("keywrap: %w", err)
	}
	id, err := hkdf.Key(sha256.New, secret, nil, idInfo, 8)
	if err != nil {
		return nil, fmt.Errorf("keywrap: derive the key id: %w", err)
	}
	return &Key{aead: aead, id: hex.EncodeToString(id)}, nil
}

// ID is a public fingerprint of the master key (16 hex characters, derived
// separately from the secret, so it reveals nothing about it). Nodes log it
// at start: nodes of one cluster must show the same ID.
func (k *Key) ID() string {
	if k == nil {
		return ""
	}
	return k.id
}

// IsWrapped reports whether stored is a wrapped key (by its size and
// version byte).
func IsWrapped(stored segment.SecretKey) bool {
	return len(stored) == segment.WrappedKeySize && stored[0] == Version
}

// Wrap seals the plain key of business biz. The result opens only with this
// master key and only for biz.
func (k *Key) Wrap(biz string, plain segment.SecretKey) (segment.SecretKey, error) {
	if k == nil {
		return nil, fmt.Errorf("business %q: cannot wrap its key: %w", biz, ErrNoMasterKey)
	}
	if len(plain) != segment.KeySize {
		return nil, fmt.Errorf("business %q: %w: the key to wrap is %d bytes, want %d", biz, ErrBadKey, len(plain), segment.KeySize)
	}
	out := make([]byte, 1+nonceSize, segment.WrappedKeySize)
	out[0] = Version
	_, _ = rand.Read(out[1:]) // crypto/rand.Read never fails (Go 1.24+)
	out = k.aead.Seal(out, out[1:1+nonceSize], plain, []byte(biz))
	return out, nil
}

// Unwrap returns the plain key of business biz from its stored bytes: a
// plain key (segment.KeySize bytes, not wrapped yet) as is, a wrapped one
// opened. Errors wrap ErrNoMasterKey (k is nil), ErrWrongMasterKey or
// ErrBadKey.
func (k *Key) Unwrap(biz string, stored segment.SecretKey) (segment.SecretKey, error) {
	switch {
	case len(stored) == segment.KeySize:
		return stored, nil
	case len(stored) != segment.WrappedKeySize:
		return nil, fmt.Errorf("business %q: %w: %d bytes, want %d (plain) or %d (wrapped)", biz, ErrBadKey, len(stored), segment.KeySize, segment.WrappedKeySize)
	case stored[0] != Version:
		return nil, fmt.Errorf("business %q: %w: wrapped key version %d, this node knows %d: upgrade the node", biz, ErrBadKey, stored[0], Version)
	case k == nil:
		return nil, fmt.Errorf("business %q's key is wrapped by a master key: start the node with --master-key-file: %w", biz, ErrNoMasterKey)
	}
	plain, err := k.aead.Open(nil, stored[1:1+nonceSize], stored[1+nonceSize:], []byte(biz))
	if err != nil {
		return nil, fmt.Errorf("the master key does not open business %q's key: wrong --master-key-file? (%w)", biz, ErrWrongMasterKey)
	}
	return plain, nil
}
