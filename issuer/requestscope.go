package issuer

import (
	"crypto/sha256"
	"encoding/hex"
)

// requestScopeLabel separates the request scope's hash from every other
// hash of a token (hashToken, which the stores keep for business tokens):
// a scope cannot be compared with a stored token hash.
const requestScopeLabel = "idgen request scope\x00"

// RequestScope is the scope of the ORDERED request ids of a caller that
// presented token (segment.RequestID.Scope): "" without a token, else 16
// hex digits of a SHA-256 of the token. Request ids are scoped to the
// credential so that a second caller reusing an id can neither get the
// first caller's range back nor claim the id before the first caller uses
// it: the business token or the shared client token, whichever the request
// carried and was authorized with. Callers without a token (a business and
// a cluster without tokens) share one scope: nothing tells them apart.
//
// It depends on the token alone, so the node that forwards a request and
// the shard's owner that serves it (which gets the token with the request)
// compute the same scope. What the stores keep is this fingerprint, never
// the token: 64 bits of a labelled hash, enough to keep callers apart,
// useless as a credential, and unlike the SHA-256 a store keeps of a
// business token.
func RequestScope(token string) string {
	if token == "" {
		return ""
	}
	var buf [128]byte
	h := sha256.Sum256(append(append(buf[:0], requestScopeLabel...), token...))
	return hex.EncodeToString(h[:8])
}
