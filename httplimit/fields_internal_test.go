package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/headers"
	"github.com/floodgate-go/floodgate/memstore"
)

// TestPlanFieldsAsWriteReports: for any policies a plan can have (a single
// algorithm or a Limits, default or given names, any quota and window
// floodgate accepts) and any decisions a store may report (the binding
// limit any, Limit other than the quota, counts and durations out of the
// fields' range, each limit's Decision filled or not), the fields the
// middleware writes with its plan's headers.PolicySet are byte for byte
// those headers.WriteReports writes for the same reports, in every style.
func TestPlanFieldsAsWriteReports(t *testing.T) {
	store, err := memstore.New(nil)
	require.NoError(t, err)
	now := time.Unix(1_700_000_000, 500_000_000)
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, maxLimits).Draw(t, "limits")
		ls := make(floodgate.Limits, n)
		for i := range ls {
			ls[i] = floodgate.FixedWindow{
				Limit:  rapid.OneOf(rapid.Int64Range(1, 1000), rapid.Int64Range(1, 1<<53)).Draw(t, "quota"),
				Window: time.Duration(rapid.Int64Range(1, int64(floodgate.MaxWindow/time.Microsecond)).Draw(t, "window")) * time.Microsecond,
			}
		}
		var alg floodgate.Algorithm = ls
		if n == 1 && rapid.Bool().Draw(t, "single") {
			alg = ls[0]
		}
		lim, err := floodgate.New(store, alg, nil)
		require.NoError(t, err)
		var names []string
		if rapid.Bool().Draw(t, "named") {
			names = rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z"\\ -]{1,12}`), n, n, rapid.ID[string]).Draw(t, "names")
		}
		style := headers.Style(rapid.IntRange(0, 7).Draw(t, "style"))
		m, err := newMiddleware(&Options{
			Style: style, OmitFields: style == 0,
			XReset: rapid.SampledFrom([]headers.ResetFormat{headers.ResetAuto, headers.ResetEpoch}).Draw(t, "xreset"),
			Now:    func() time.Time { return now },
		})
		require.NoError(t, err)
		p, err := m.newPlan("", lim, names)
		require.NoError(t, err)

		quota := func(i int) int64 { return ls[min(max(i, 0), n-1)].(floodgate.FixedWindow).Limit }
		// decision draws the Decision of limit i: its Limit is the
		// limit's quota, as memstore reports it, or now and then anything.
		decision := func(label string, i int) floodgate.Decision {
			d := floodgate.Decision{
				Allowed:    rapid.Bool().Draw(t, label+" allowed"),
				Limit:      quota(i),
				Remaining:  rapid.OneOf(rapid.Int64Range(0, 1000), rapid.Int64()).Draw(t, label+" remaining"),
				ResetAfter: time.Duration(rapid.OneOf(rapid.Int64Range(0, int64(time.Hour)), rapid.Int64()).Draw(t, label+" reset")),
				RetryAfter: time.Duration(rapid.OneOf(rapid.Int64Range(0, int64(time.Hour)), rapid.Int64()).Draw(t, label+" retry")),
			}
			if rapid.IntRange(0, 3).Draw(t, label+" other limit") == 0 {
				d.Limit = rapid.Int64().Draw(t, label+" limit")
			}
			return d
		}
		var each []floodgate.Decision
		if p.composite {
			each = make([]floodgate.Decision, n)
			if rapid.Bool().Draw(t, "filled") {
				for i := range each {
					each[i] = decision("each", i)
				}
			}
		}
		binding := rapid.IntRange(-1, n).Draw(t, "binding") // out of range now and then
		d := decision("binding", binding)
		d.Binding = binding
		var reps [maxLimits]headers.Report
		got := reps[:m.reports(&reps, p, d, each)]

		fast, general := http.Header{}, http.Header{}
		m.writeReports(fast, p, got)
		opts := m.writeOpt
		opts.Now = now
		require.NoError(t, headers.WriteReports(general, m.style, got, &opts))
		require.Equal(t, general, fast, "reports %+v", got)
	})
}
