package issuer

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/idgen/idgen/issuer/keywrap"
	"github.com/idgen/idgen/segment"
)

// ErrMasterKey: a business's obfuscation key cannot be used on this node:
// it is wrapped and the node has no master key (keywrap.ErrNoMasterKey), or
// the node's master key does not open it (keywrap.ErrWrongMasterKey). The
// fix is in the node's configuration (--master-key-file), not the request:
// the server answers INTERNAL with the message.
var ErrMasterKey = errors.New("obfuscation key unavailable")

// plainKey is a cached unwrapped key, valid while the stored bytes are the
// same.
type plainKey struct {
	stored segment.SecretKey
	plain  segment.SecretKey
}

// businessKey returns b's plain obfuscation key. Opening a wrapped key is
// an AES-GCM operation: the result is cached per business and stored
// bytes, so Decode does not pay it per call.
func (is *Issuer) businessKey(b segment.Biz) (segment.SecretKey, error) {
	if len(b.Key) != segment.WrappedKeySize {
		return b.Key, nil // plain (or absent or damaged: obfuscate refuses its size)
	}
	if v, ok := is.keys.Load(b.Name); ok {
		if pk := v.(*plainKey); bytes.Equal(pk.stored, b.Key) {
			return pk.plain, nil
		}
	}
	plain, err := is.cfg.MasterKey.Unwrap(b.Name, b.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMasterKey, err)
	}
	is.keys.Store(b.Name, &plainKey{stored: bytes.Clone(b.Key), plain: plain})
	return plain, nil
}

// storedKey is what CreateBiz stores as the key of a new business: with a
// master key, a fresh key wrapped (the caller's key, if it gave a plain
// one, wrapped); without, the caller's key (nil: the store generates one).
func (is *Issuer) storedKey(name string, key segment.SecretKey) (segment.SecretKey, error) {
	if is.cfg.MasterKey == nil || keywrap.IsWrapped(key) {
		return key, nil
	}
	if len(key) == 0 {
		key = segment.NewSecretKey()
	}
	w, err := is.cfg.MasterKey.Wrap(name, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return w, nil
}

// WrapKeys wraps, with the node's master key, every business key the store
// still holds plain (businesses created before the master key, or by a node
// without one). The plain key inside is the same, so outputs do not change.
// It also tries every key already wrapped, so a node started with another
// cluster's master key finds out at start rather than on the first request
// of an obfuscated business. Without a master key it does nothing.
//
// wrapped counts the keys wrapped; err joins the failures (a business whose
// key could not be wrapped, or whose wrapped key this master key does not
// open: errors.Is(err, ErrMasterKey)). Two nodes wrapping at once is
// harmless: both store the same plain key, sealed with different nonces.
func (is *Issuer) WrapKeys(ctx context.Context) (wrapped int, err error) {
	mk := is.cfg.MasterKey
	if mk == nil {
		return 0, nil
	}
	bs, err := is.cfg.Store.ListBiz(ctx)
	if err != nil {
		return 0, fmt.Errorf("wrap business keys: list businesses: %w", err)
	}
	var errs []error
	for _, b := range bs {
		switch {
		case len(b.Key) == segment.KeySize:
			w, werr := mk.Wrap(b.Name, b.Key)
			if werr == nil {
				_, werr = is.cfg.Store.UpdateBiz(ctx, b.Name, segment.BizUpdate{Key: w})
				is.cfg.Bizs.Invalidate(b.Name)
			}
			if werr != nil {
				errs = append(errs, fmt.Errorf("wrap business %q's key: %w", b.Name, werr))
				continue
			}
			wrapped++
		case len(b.Key) > 0:
			if _, uerr := is.businessKey(b); uerr != nil {
				errs = append(errs, uerr)
			}
		}
	}
	if wrapped > 0 {
		is.log.Info("business keys wrapped with the master key", zap.Int("wrapped", wrapped), zap.String("master_key_id", mk.ID()))
	}
	return wrapped, errors.Join(errs...)
}

// wrapIfPlain wraps b's key when it is plain and the node has a master key:
// an update can give a business that had none a fresh plain key (see
// segment.ApplyBizUpdate), which should not stay plain until the next
// WrapKeys. Best effort: a failure leaves the plain key, which still works.
func (is *Issuer) wrapIfPlain(ctx context.Context, b segment.Biz) segment.Biz {
	if is.cfg.MasterKey == nil || len(b.Key) != segment.KeySize {
		return b
	}
	w, err := is.cfg.MasterKey.Wrap(b.Name, b.Key)
	if err != nil {
		return b
	}
	out, err := is.cfg.Store.UpdateBiz(ctx, b.Name, segment.BizUpdate{Key: w})
	is.cfg.Bizs.Invalidate(b.Name)
	if err != nil {
		is.log.Warn("could not wrap a business key with the master key: it stays plain until the next start", zap.String("biz", b.Name), zap.Error(err))
		return b
	}
	return out
}
