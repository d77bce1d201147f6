package httplimit

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"reflect"
)

// KeyFunc returns the rate-limit key of a request, and false when it cannot
// name one (a missing header, an anonymous request), so that a KeyChain can
// try the next function. A KeyFunc must be safe for concurrent use.
//
// The key functions of this package prefix what they return ("key:", "sub:",
// "ip:"), so that keys of different kinds never collide in one store.
type KeyFunc func(r *http.Request) (key string, ok bool)

// KeyChain returns a KeyFunc that tries fns in order and returns the first
// key found. A typical chain limits authenticated callers by identity and
// everyone else by address:
//
//	httplimit.KeyChain(
//		httplimit.KeyByAPIKey("X-API-Key"),
//		httplimit.KeyByIP(&httplimit.IPKeyOptions{TrustedProxies: proxies}),
//	)
//
// A function that finds no key (it reports false, or an empty key) falls
// through to the next one; the first that finds one ends the chain, and the
// later ones are not called. Only when every function finds none does the
// chain report none, and the middleware answers ErrNoKey: 401 Unauthorized
// by default, so a chain of credentials alone (KeyByAPIKey, KeyBySubject)
// refuses anonymous requests, while one that ends with KeyByIP limits them
// by address (KeyByIP finds no key only for a peer without an IP address,
// such as a Unix socket's). Nil functions are skipped.
func KeyChain(fns ...KeyFunc) KeyFunc {
	fns = append([]KeyFunc(nil), fns...) // later changes to the caller's slice do not leak in
	return func(r *http.Request) (string, bool) {
		for _, f := range fns {
			if f == nil {
				continue
			}
			if k, ok := f(r); ok && k != "" {
				return k, true
			}
		}
		return "", false
	}
}

// KeyByAPIKey returns a KeyFunc that keys requests by the value of the
// header field named header (for example "X-API-Key" or "Authorization").
// A request without the field, or with an empty value, has no key.
//
// The value is a secret: it is never used as it is. The key is "key:"
// followed by the first 128 bits of its SHA-256 digest in unpadded base64url
// (22 characters), so that neither a store (a Redis key, a memory dump) nor
// a log of keys reveals a credential, and every key has the same short
// length whatever the client sends. A digest does not hide a guessable
// value: the API keys themselves must be random.
func KeyByAPIKey(header string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(header)
		if v == "" {
			return "", false
		}
		return hashedKey("key:", v), true
	}
}

// hashedKey returns prefix followed by a 128-bit digest of v.
func hashedKey(prefix, v string) string {
	sum := sha256.Sum256([]byte(v))
	return prefix + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// maxSubjectLen is the longest subject used as it is; longer ones are hashed
// so that keys stay short and below floodgate.MaxKeyLen.
const maxSubjectLen = 128

// KeyBySubject returns a KeyFunc that keys requests by the authenticated
// subject an earlier middleware stored in the request's context under
// ctxKey: r.Context().Value(ctxKey) must be a non-empty string (or a type
// whose underlying type is string) or a fmt.Stringer. The key is "sub:"
// followed by the subject; a subject longer than 128 bytes is replaced by
// its digest ("sub#" and 22 characters), as KeyByAPIKey does.
func KeyBySubject(ctxKey any) KeyFunc {
	return func(r *http.Request) (string, bool) {
		var s string
		switch v := r.Context().Value(ctxKey).(type) {
		case nil:
		case string:
			s = v
		case fmt.Stringer:
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
				return "", false // a typed nil: calling String could panic
			}
			s = v.String()
		default:
			if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
				s = rv.String() // a named string type, such as type UserID string
			}
		}
		if s == "" {
			return "", false
		}
		if len(s) > maxSubjectLen {
			return hashedKey("sub#", s), true
		}
		return "sub:" + s, true
	}
}
