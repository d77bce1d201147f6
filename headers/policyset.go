package headers

import (
	"bytes"
	"net/http"
	"strconv"
)

// PolicySet holds policies with the parts of their fields that never change
// formatted once: each policy's item of RateLimit-Policy (and, for a few
// policies, the whole field with each one listed first), the name and
// partition key of its items of RateLimit, and its quota as the trios write
// it. A server that sends the fields of the same policies on every
// response, as a middleware does for its limiter, builds a PolicySet at
// start-up and writes with its WriteReports, which formats only the counts
// and costs at most two allocations per call.
//
// Build it with NewPolicySet. The zero value holds no policy: its
// WriteReports is the package's WriteReports. A PolicySet is never modified
// once built and is safe for concurrent use.
type PolicySet struct {
	texts []policyText
	// fields[b] is the RateLimit-Policy value listing every policy,
	// texts[b]'s first and the others in their order: the field of a
	// decision whose binding policy is b. Nil beyond
	// maxPrecomputedOrders policies.
	fields []string
}

// policyText is one policy and the constant text of its fields.
type policyText struct {
	p         Policy // a copy whose PartitionKey the PolicySet owns
	policy    string // its item of RateLimit-Policy
	limitName string // the start of its items of RateLimit: `"name";r=`
	limitPK   string // the end of its items of RateLimit: ";pk=:…:", or ""
	quota     string // its Quota in decimal, as the trios write it
}

// maxPrecomputedOrders is the most policies whose whole RateLimit-Policy
// field a PolicySet holds for each binding policy: the texts take the
// square of the number of policies. Beyond it the field is assembled from
// the policies' items on each call, which copies them and formats nothing.
const maxPrecomputedOrders = 8

// NewPolicySet returns the PolicySet of policies. It fails, as
// FormatPolicy does, with ErrRange when policies is empty or one cannot be
// written (a negative quota or window, a quota above MaxInteger), and with
// ErrSyntax when a name or unit is not printable ASCII. It copies each
// policy's PartitionKey. Policies should have distinct names: RateLimit
// refers to policies by name.
func NewPolicySet(policies ...Policy) (*PolicySet, error) {
	if len(policies) == 0 {
		return nil, fieldError(FieldRateLimitPolicy, ErrRange, "no policy to format")
	}
	s := &PolicySet{texts: make([]policyText, len(policies))}
	for i, p := range policies {
		p.PartitionKey = bytes.Clone(p.PartitionKey) // nil stays nil: no pk
		item, err := appendPolicy(nil, p)
		if err != nil {
			return nil, err
		}
		name, _ := appendSFString(nil, p.Name) // appendPolicy checked the name
		t := policyText{
			p:         p,
			policy:    string(item),
			limitName: string(append(name, ";r="...)),
			quota:     strconv.FormatInt(p.Quota, 10),
		}
		if p.PartitionKey != nil {
			t.limitPK = string(appendSFBytes([]byte(";pk="), p.PartitionKey))
		}
		s.texts[i] = t
	}
	if len(policies) <= maxPrecomputedOrders {
		s.fields = make([]string, len(policies))
		for first := range s.texts {
			b := []byte(s.texts[first].policy)
			for i := range s.texts {
				if i != first {
					b = append(append(b, ", "...), s.texts[i].policy...)
				}
			}
			s.fields[first] = string(b)
		}
	}
	return s, nil
}

// WriteReports is the package's WriteReports(h, style, reps, opts), byte
// for byte and error for error: it takes the text of every report whose
// Policy equals one of s's (every field, PartitionKey compared by content,
// nil apart from empty) from s, and formats the others as WriteReports
// does. It costs at most two allocations however many fields it sets (one
// string for the values that vary, one array for the fields' []string
// values, each of length and capacity 1 and owned by h), as long as the
// values that vary fit in 512 bytes, as those of 8 policies with names of
// up to 20 bytes and no partition key do.
func (s *PolicySet) WriteReports(h http.Header, style Style, reps []Report, opts *WriteOptions) error {
	return writeReports(h, style, reps, opts, s)
}

// text returns the text of p when s holds p, and nil otherwise. s may be
// nil.
func (s *PolicySet) text(p Policy) *policyText {
	if s == nil {
		return nil
	}
	for i := range s.texts {
		if t := &s.texts[i]; samePolicy(t.p, p) {
			return t
		}
	}
	return nil
}

// match returns the index in s of reps[0]'s policy, -1 when s does not
// hold it, and whether reps are in the order a middleware writes them: one
// report of a policy of s, or a report of each policy of s, the first any
// of them and the others in s's order. Then the i-th report's policy is
// s.texts[s.nth(first, i)]. s may be nil.
func (s *PolicySet) match(reps []Report) (first int, inOrder bool) {
	if s == nil {
		return -1, false
	}
	first = -1
	for i := range s.texts {
		if samePolicy(s.texts[i].p, reps[0].Policy) {
			first = i
			break
		}
	}
	switch {
	case first < 0:
		return -1, false
	case len(reps) == 1:
		return first, true
	case len(reps) != len(s.texts):
		return first, false
	}
	for i := 1; i < len(reps); i++ {
		if !samePolicy(s.texts[s.nth(first, i)].p, reps[i].Policy) {
			return first, false
		}
	}
	return first, true
}

// nth returns the index in s of the i-th report of reps in the order
// match recognises, whose first report is of s.texts[first].
func (s *PolicySet) nth(first, i int) int {
	switch {
	case i == 0:
		return first
	case i <= first:
		return i - 1
	}
	return i
}

// policyField returns the whole RateLimit-Policy value of reps, which
// match found in order with reps[0] of s.texts[first], when s holds it.
func (s *PolicySet) policyField(reps []Report, first int) (string, bool) {
	switch {
	case len(reps) == 1:
		return s.texts[first].policy, true
	case s.fields != nil:
		return s.fields[first], true
	}
	return "", false
}

// samePolicy reports whether a and b are written alike because they are
// equal: every field, the partition keys by content, a nil key (no pk)
// apart from an empty one (an empty pk).
func samePolicy(a, b Policy) bool {
	return a.Name == b.Name && a.Quota == b.Quota && a.Window == b.Window && a.QuotaUnit == b.QuotaUnit &&
		(a.PartitionKey == nil) == (b.PartitionKey == nil) && bytes.Equal(a.PartitionKey, b.PartitionKey)
}
