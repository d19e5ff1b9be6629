package issuer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/idgen/idgen/segment"
)

// ErrUnauthenticated: NextIDs without the token the business (or the
// cluster) requires. The message says which token, never the one given.
var ErrUnauthenticated = errors.New("unauthenticated")

// TokenPrefix starts every business token: "idgt_" + its 12-hex-digit ID +
// "_" + 43 characters of base64url (256 random bits). The ID inside lets
// the node find the token's hash without trying each, and lets secret
// scanners recognise a leaked token.
const TokenPrefix = "idgt_"

const tokenIDLen = 12

// authorize checks req.Token before anything can create state (a rate
// limiter entry, an auto-created business):
//   - a business with tokens of its own accepts one of them, and only them;
//   - otherwise, with a shared client token configured, that token;
//   - otherwise anything.
//
// b is the business, or nil when it does not exist (yet).
func (is *Issuer) authorize(b *segment.Biz, token string) error {
	if b != nil && len(b.Tokens) > 0 {
		if bizTokenOK(b.Tokens, token) {
			return nil
		}
		return fmt.Errorf("%w: business %q requires one of its own tokens (the one sent is missing, unknown, revoked or wrong; the shared client token does not open it): ask its owner for one ('idctl biz token create')",
			ErrUnauthenticated, b.Name)
	}
	if is.clientTokenHash == nil {
		return nil
	}
	h := hashToken(token)
	// Hashes, so the comparison's time reveals neither the token nor its
	// length.
	if subtle.ConstantTimeCompare(h[:], is.clientTokenHash) == 1 {
		return nil
	}
	return fmt.Errorf("%w: the client token is required (missing or wrong): set the request's token to the cluster's client token", ErrUnauthenticated)
}

// bizTokenOK reports whether token is one of tokens: the ID embedded in
// the token picks the candidate, whose hash is compared in constant time.
func bizTokenOK(tokens []segment.BizToken, token string) bool {
	id, ok := tokenID(token)
	if !ok {
		return false
	}
	for i := range tokens {
		if tokens[i].ID != id {
			continue
		}
		h := hashToken(token)
		return subtle.ConstantTimeCompare(h[:], tokens[i].Hash) == 1
	}
	return false
}

// hashToken is SHA-256 of token, without a heap copy of it for tokens up
// to 64 bytes (business tokens are 54): this runs on every request.
func hashToken(token string) [sha256.Size]byte {
	var buf [64]byte
	return sha256.Sum256(append(buf[:0], token...))
}

// tokenID returns the ID inside a business token.
func tokenID(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, "_")
	return id, ok && id != ""
}

// CreateBizToken adds a client token to business biz and returns it with
// its secret. The secret is shown only here: the store keeps its SHA-256.
// From then on the business accepts only its own tokens (the shared client
// token no longer opens it). Other nodes see the token within the business
// cache's refresh (about 2 s).
func (is *Issuer) CreateBizToken(ctx context.Context, biz, label string) (segment.BizToken, string, error) {
	if err := segment.ValidateBizName(biz); err != nil {
		return segment.BizToken{}, "", err
	}
	if len(label) > segment.MaxTokenLabelLen || !utf8.ValidString(label) {
		return segment.BizToken{}, "", fmt.Errorf("%w: token label is %d bytes, want valid UTF-8 of at most %d", ErrInvalid, len(label), segment.MaxTokenLabelLen)
	}
	idBytes := make([]byte, tokenIDLen/2)
	secretBytes := make([]byte, 32)
	_, _ = rand.Read(idBytes) // crypto/rand.Read never fails (Go 1.24+)
	_, _ = rand.Read(secretBytes)
	id := hex.EncodeToString(idBytes)
	secret := TokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secretBytes)
	h := hashToken(secret)
	tok := segment.BizToken{ID: id, Label: label, Hash: h[:], CreatedAt: is.clk.Now().UTC()}
	_, err := is.cfg.Store.UpdateBiz(ctx, biz, segment.BizUpdate{AddToken: &tok})
	is.cfg.Bizs.Invalidate(biz)
	if err != nil {
		return segment.BizToken{}, "", err
	}
	return tok, secret, nil
}

// RevokeBizToken removes the token with that ID from business biz and
// returns how many tokens remain (with none left, the business follows the
// shared client token again). Other nodes stop accepting it within the
// business cache's refresh (about 2 s).
func (is *Issuer) RevokeBizToken(ctx context.Context, biz, id string) (remaining int, err error) {
	if err := segment.ValidateBizName(biz); err != nil {
		return 0, err
	}
	if id == "" || len(id) > segment.MaxTokenIDLen {
		return 0, fmt.Errorf("%w: token id %s: want the 12-character id 'idctl biz token list' shows", ErrInvalid, quoteTrunc(id))
	}
	b, err := is.cfg.Store.UpdateBiz(ctx, biz, segment.BizUpdate{RevokeToken: &id})
	is.cfg.Bizs.Invalidate(biz)
	if err != nil {
		return 0, err
	}
	return len(b.Tokens), nil
}
