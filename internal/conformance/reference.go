package conformance

import (
	"time"

	"github.com/floodgate-go/floodgate"
)

// Reference applies the algorithms' reference Steps to state kept in maps:
// the decisions every store must reproduce, for tests outside this package
// that drive a store in ways the suite cannot (a store's own reclamation,
// options or internals). The zero value is not usable; use NewReference. A
// Reference is not safe for concurrent use.
type Reference struct{ r *reference }

// NewReference returns a Reference in which every key is new.
func NewReference() *Reference { return &Reference{r: newReference()} }

// Apply applies req for key and alg at now, as a Store's Apply would.
func (r *Reference) Apply(key string, alg floodgate.Algorithm, now time.Time, req floodgate.Request) (floodgate.Result, error) {
	return r.r.apply(key, alg, now, req)
}

// SameResult reports whether two results are equal, their instants compared
// with time.Time.Equal.
func SameResult(a, b floodgate.Result) bool { return sameResult(a, b) }
