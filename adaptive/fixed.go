package adaptive

// Fixed is a Limit that never changes: a plain concurrency cap (a semaphore)
// with the Limiter's accounting, partitions and middleware on top. Use it when
// the right limit is known, or as a baseline against adaptive limits.
//
// The zero value is not usable; create one with NewFixed. A Fixed is
// immutable and therefore safe for concurrent use.
type Fixed struct {
	limit int
}

var _ Limit = (*Fixed)(nil)

// NewFixed returns a Limit that always reports limit, which must be at
// least 1.
func NewFixed(limit int) (*Fixed, error) {
	if limit < 1 {
		return nil, invalid("fixed limit %d < 1", limit)
	}
	return &Fixed{limit: limit}, nil
}

// Current returns the fixed limit.
func (f *Fixed) Current() int { return f.limit }

// Update ignores s and returns the fixed limit.
func (f *Fixed) Update(Sample) int { return f.limit }
