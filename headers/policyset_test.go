package headers_test

import (
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate/headers"
)

// policyGen draws a policy that NewPolicySet accepts: names with the
// characters an sf-string escapes, quotas and windows up to their bounds,
// units and partition keys (nil and empty both) now and then.
func policyGen() *rapid.Generator[headers.Policy] {
	return rapid.Custom(func(t *rapid.T) headers.Policy {
		p := headers.Policy{
			Name:   rapid.StringMatching(`[a-z0-9 "\\-]{0,12}`).Draw(t, "name"),
			Quota:  rapid.OneOf(rapid.Int64Range(0, 1000), rapid.Int64Range(0, headers.MaxInteger)).Draw(t, "quota"),
			Window: time.Duration(rapid.OneOf(rapid.Int64Range(0, int64(time.Hour)), rapid.Int64Range(0, math.MaxInt64)).Draw(t, "window")),
		}
		if rapid.Bool().Draw(t, "unit") {
			p.QuotaUnit = rapid.SampledFrom([]string{"requests", "content-bytes", "concurrent-requests"}).Draw(t, "qu")
		}
		switch rapid.IntRange(0, 3).Draw(t, "pk") {
		case 1:
			p.PartitionKey = []byte{}
		case 2:
			p.PartitionKey = rapid.SliceOfN(rapid.Byte(), 1, 8).Draw(t, "pkbytes")
		}
		return p
	})
}

// reportGen draws a report of pol: admitted or denied, with counts and
// durations in range and, now and then, out of range.
func reportGen(pol headers.Policy) *rapid.Generator[headers.Report] {
	return rapid.Custom(func(t *rapid.T) headers.Report {
		return headers.Report{
			Policy:     pol,
			Remaining:  rapid.OneOf(rapid.Int64Range(0, 100), rapid.Int64Range(0, headers.MaxInteger), rapid.Int64()).Draw(t, "remaining"),
			ResetAfter: time.Duration(rapid.OneOf(rapid.Int64Range(0, int64(time.Minute)), rapid.Int64()).Draw(t, "reset")),
			Denied:     rapid.Bool().Draw(t, "denied"),
			RetryAfter: time.Duration(rapid.OneOf(rapid.Int64Range(0, int64(time.Minute)), rapid.Int64()).Draw(t, "retry")),
		}
	})
}

// TestPolicySetWritesAsWriteReports: for any policies and any reports, in
// every style, PolicySet.WriteReports writes the bytes WriteReports writes,
// fails when it fails, and then leaves the header as it found it. The
// reports are those a middleware writes (every policy, any one first, the
// others in order; or one policy alone) and others that miss the
// precomputed text: a policy changed in one field, reports in another
// order, a subset, policies not in the set.
func TestPolicySetWritesAsWriteReports(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pols := rapid.SliceOfN(policyGen(), 1, 10).Draw(t, "policies")
		set, err := headers.NewPolicySet(pols...)
		require.NoError(t, err)

		var reps []headers.Report
		switch rapid.IntRange(0, 3).Draw(t, "shape") {
		case 0: // every policy, the binding one first
			first := rapid.IntRange(0, len(pols)-1).Draw(t, "first")
			reps = append(reps, reportGen(pols[first]).Draw(t, "binding"))
			for i, p := range pols {
				if i != first {
					reps = append(reps, reportGen(p).Draw(t, fmt.Sprint("report", i)))
				}
			}
		case 1: // the binding one alone
			reps = append(reps, reportGen(rapid.SampledFrom(pols).Draw(t, "alone")).Draw(t, "report"))
		case 2: // any policies of the set, in any order
			for _, p := range rapid.SliceOfN(rapid.SampledFrom(pols), 1, 10).Draw(t, "any") {
				reps = append(reps, reportGen(p).Draw(t, "report"))
			}
		case 3: // any policies, most not in the set
			for _, p := range rapid.SliceOfN(policyGen(), 1, 10).Draw(t, "others") {
				reps = append(reps, reportGen(p).Draw(t, "report"))
			}
		}
		if rapid.Bool().Draw(t, "change") {
			// One report's policy differs from the set's in one field.
			p := &reps[rapid.IntRange(0, len(reps)-1).Draw(t, "changed")].Policy
			switch rapid.IntRange(0, 5).Draw(t, "field") {
			case 0:
				p.Name += "x"
			case 1:
				p.Quota = rapid.Int64Range(-1, headers.MaxInteger+1).Draw(t, "newquota")
			case 2:
				p.Window += time.Nanosecond
			case 3:
				p.QuotaUnit = "bad\n"
			case 4:
				if p.PartitionKey == nil {
					p.PartitionKey = []byte{}
				} else {
					p.PartitionKey = nil
				}
			case 5:
				p.Name = "bad\x7f"
			}
		}
		style := headers.Style(rapid.IntRange(0, 7).Draw(t, "style"))
		opts := &headers.WriteOptions{
			XReset: rapid.SampledFrom([]headers.ResetFormat{headers.ResetAuto, headers.ResetDelta, headers.ResetEpoch}).Draw(t, "xreset"),
			Now:    time.Unix(1_700_000_000, rapid.Int64Range(0, 999_999_999).Draw(t, "nanos")),
		}

		old := http.Header{"Ratelimit": {"old"}, "X-Other": {"kept"}}
		want, got := old.Clone(), old.Clone()
		wantErr := headers.WriteReports(want, style, reps, opts)
		gotErr := set.WriteReports(got, style, reps, opts)
		if wantErr != nil {
			require.Error(t, gotErr, "WriteReports failed with %v", wantErr)
			assert.Equal(t, wantErr.Error(), gotErr.Error())
			assert.Equal(t, old, got, "a failed PolicySet.WriteReports changed the header")
			return
		}
		require.NoError(t, gotErr)
		assert.Equal(t, want, got, "style %v, reports %+v", style, reps)
	})
}

// TestPolicySetCopies: a PolicySet keeps its own copy of the partition
// keys, so a caller's later change to them changes neither its text nor
// which reports it recognises.
func TestPolicySetCopies(t *testing.T) {
	pk := []byte("p")
	pol := headers.Policy{Name: "hourly", Quota: 100, Window: time.Hour, PartitionKey: pk}
	set, err := headers.NewPolicySet(pol)
	require.NoError(t, err)
	pk[0] = 'q'
	h := http.Header{}
	require.NoError(t, set.WriteReports(h, headers.StyleIETF, []headers.Report{{Policy: pol, Remaining: 1}}, nil))
	assert.Equal(t, http.Header{
		"Ratelimit-Policy": {`"hourly";q=100;w=3600;pk=:cQ==:`},
		"Ratelimit":        {`"hourly";r=1;t=0;pk=:cQ==:`},
	}, h)
}

func TestNewPolicySetFails(t *testing.T) {
	for name, tt := range map[string]struct {
		pols []headers.Policy
		want error
	}{
		"none":            {nil, headers.ErrRange},
		"negative quota":  {[]headers.Policy{{Name: "a", Quota: -1}}, headers.ErrRange},
		"quota too large": {[]headers.Policy{{Name: "a", Quota: headers.MaxInteger + 1}}, headers.ErrRange},
		"negative window": {[]headers.Policy{{Name: "a", Quota: 1, Window: -time.Second}}, headers.ErrRange},
		"name not ASCII":  {[]headers.Policy{{Name: "a"}, {Name: "é"}}, headers.ErrSyntax},
		"unit not ASCII":  {[]headers.Policy{{Name: "a", QuotaUnit: "\t"}}, headers.ErrSyntax},
	} {
		t.Run(name, func(t *testing.T) {
			set, err := headers.NewPolicySet(tt.pols...)
			assert.ErrorIs(t, err, tt.want)
			assert.Nil(t, set)
		})
	}
}

// TestPolicySetZeroValue: a PolicySet that holds no policy writes as
// WriteReports does.
func TestPolicySetZeroValue(t *testing.T) {
	reps := []headers.Report{{Policy: minutePolicy, Remaining: 42, ResetAfter: 16500 * time.Millisecond}}
	want, got := http.Header{}, http.Header{}
	require.NoError(t, headers.WriteReports(want, headers.StyleIETF|headers.StyleX, reps, nil))
	require.NoError(t, new(headers.PolicySet).WriteReports(got, headers.StyleIETF|headers.StyleX, reps, nil))
	assert.Equal(t, want, got)
}

// TestPolicySetAllocations: writing the reports of a set's policies costs
// at most two allocations in every style, admitted or denied, for one
// policy and for 8 (the most a floodgate.Limits holds).
func TestPolicySetAllocations(t *testing.T) {
	var pols []headers.Policy
	for i := range 8 {
		pols = append(pols, headers.Policy{Name: fmt.Sprintf("%d-per-1m-name-of-20", i), Quota: headers.MaxInteger, Window: time.Minute})
	}
	opts := &headers.WriteOptions{XReset: headers.ResetEpoch, Now: time.Unix(1_700_000_000, 1)}
	for _, n := range []int{1, 8} {
		set, err := headers.NewPolicySet(pols[:n]...)
		require.NoError(t, err)
		// The last policy binds; the others follow in order.
		longest := math.MaxInt64 / time.Second * time.Second
		reps := []headers.Report{{Policy: pols[n-1], Remaining: headers.MaxInteger, ResetAfter: longest}}
		for _, p := range pols[:n-1] {
			reps = append(reps, headers.Report{Policy: p, Remaining: headers.MaxInteger, ResetAfter: longest})
		}
		h := http.Header{}
		for style := headers.Style(0); style <= headers.StyleIETF|headers.StyleDraft|headers.StyleX; style++ {
			for _, denied := range []bool{false, true} {
				reps[0].Denied, reps[0].RetryAfter = denied, longest
				allocs := testing.AllocsPerRun(100, func() {
					clear(h)
					if err := set.WriteReports(h, style, reps, opts); err != nil {
						t.Fatal(err)
					}
				})
				assert.LessOrEqual(t, allocs, 2.0, "%d policies, style %v, denied %v", n, style, denied)
			}
		}
	}
}

// BenchmarkPolicySetWriteReports writes the IETF fields of a Limits of
// two, admitted, with WriteReports and with a PolicySet of its policies.
//
//	go test ./headers -run '^$' -bench PolicySetWriteReports -benchmem -count 6
func BenchmarkPolicySetWriteReports(b *testing.B) {
	pols := []headers.Policy{
		{Name: "1099511627776-per-1h", Quota: 1 << 40, Window: time.Hour},
		{Name: "1125899906842624-per-1m", Quota: headers.MaxInteger, Window: time.Minute},
	}
	reps := []headers.Report{
		{Policy: pols[0], Remaining: 1<<40 - 1, ResetAfter: time.Millisecond},
		{Policy: pols[1], Remaining: headers.MaxInteger - 1, ResetAfter: time.Minute},
	}
	set, err := headers.NewPolicySet(pols...)
	require.NoError(b, err)
	for _, bb := range []struct {
		name  string
		write func(http.Header, headers.Style, []headers.Report, *headers.WriteOptions) error
	}{{"WriteReports", headers.WriteReports}, {"PolicySet", set.WriteReports}} {
		b.Run(bb.name, func(b *testing.B) {
			h := http.Header{}
			b.ReportAllocs()
			for b.Loop() {
				clear(h)
				_ = bb.write(h, headers.StyleIETF, reps, nil)
			}
		})
	}
}
