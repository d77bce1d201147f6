package headers_test

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/floodgate-go/floodgate/headers"
)

func TestSeconds(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1500 * time.Millisecond, 2},
		{time.Minute, 60},
		{time.Duration(1<<63 - 1), 9223372037},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, headers.Seconds(tt.in), "Seconds(%v)", tt.in)
	}
}

func TestFormatPolicy(t *testing.T) {
	tests := []struct {
		name string
		in   []headers.Policy
		want string
	}{
		{"basic", []headers.Policy{{Name: "default", Quota: 100, Window: time.Minute}}, `"default";q=100;w=60`},
		{"window rounded up", []headers.Policy{{Name: "p", Quota: 5, Window: 1500 * time.Millisecond}}, `"p";q=5;w=2`},
		{"sub-second window is 1", []headers.Policy{{Name: "p", Quota: 5, Window: time.Millisecond}}, `"p";q=5;w=1`},
		{"no window", []headers.Policy{{Name: "p", Quota: 0}}, `"p";q=0`},
		{"all parameters", []headers.Policy{{
			Name: "peruser", Quota: 65535, QuotaUnit: "content-bytes", Window: 10 * time.Second,
			PartitionKey: []byte("user-1"),
		}}, `"peruser";q=65535;qu="content-bytes";w=10;pk=:dXNlci0x:`},
		{"escaped name", []headers.Policy{{Name: `a"b`, Quota: 1}}, `"a\"b";q=1`},
		{"several", []headers.Policy{
			{Name: "burst", Quota: 100, Window: time.Minute},
			{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
		}, `"burst";q=100;w=60, "daily";q=1000;w=86400`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.FormatPolicy(tt.in...)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got, "FormatPolicy(%+v)", tt.in)
		})
	}
}

func TestFormatErrors(t *testing.T) {
	tests := []struct {
		name   string
		format func() (string, error)
		want   error
	}{
		{"no policy", func() (string, error) { return headers.FormatPolicy() }, headers.ErrRange},
		{"negative quota", func() (string, error) { return headers.FormatPolicy(headers.Policy{Quota: -1}) }, headers.ErrRange},
		{"16-digit quota", func() (string, error) { return headers.FormatPolicy(headers.Policy{Quota: 1e15}) }, headers.ErrRange},
		{"negative window", func() (string, error) {
			return headers.FormatPolicy(headers.Policy{Quota: 1, Window: -time.Second})
		}, headers.ErrRange},
		{"non-ASCII name", func() (string, error) { return headers.FormatPolicy(headers.Policy{Name: "é"}) }, headers.ErrSyntax},
		{"newline in unit", func() (string, error) {
			return headers.FormatPolicy(headers.Policy{QuotaUnit: "a\nb"})
		}, headers.ErrSyntax},
		{"no limit", func() (string, error) { return headers.FormatRateLimit() }, headers.ErrRange},
		{"negative remaining", func() (string, error) { return headers.FormatRateLimit(headers.Limit{Remaining: -1}) }, headers.ErrRange},
		{"negative reset", func() (string, error) { return headers.FormatRateLimit(headers.Limit{Reset: -1}) }, headers.ErrRange},
		{"control character in name", func() (string, error) { return headers.FormatRateLimit(headers.Limit{Name: "\x00"}) }, headers.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.format()
			assert.ErrorIs(t, err, tt.want, "got %q", got)
			assert.Empty(t, got)
		})
	}
}

func TestFormatRateLimit(t *testing.T) {
	tests := []struct {
		name string
		in   []headers.Limit
		want string
	}{
		{"basic", []headers.Limit{{Name: "default", Remaining: 50, Reset: 30 * time.Second}}, `"default";r=50;t=30`},
		{"r and t always present", []headers.Limit{{Name: "default"}}, `"default";r=0;t=0`},
		{"reset rounded up", []headers.Limit{{Name: "d", Remaining: 1, Reset: 100 * time.Millisecond}}, `"d";r=1;t=1`},
		{"partition key", []headers.Limit{{Name: "default", Remaining: 999, PartitionKey: []byte("trial121323")}}, `"default";r=999;t=0;pk=:dHJpYWwxMjEzMjM=:`},
		{"several", []headers.Limit{{Name: "a", Remaining: 1, Reset: time.Second}, {Name: "b", Remaining: 2, Reset: 2 * time.Second}}, `"a";r=1;t=1, "b";r=2;t=2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.FormatRateLimit(tt.in...)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got, "FormatRateLimit(%+v)", tt.in)
		})
	}
}

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  []headers.Policy
	}{
		{"absent", nil, []headers.Policy{}},
		{"draft example", []string{`"burst";q=100;w=60,"daily";q=1000;w=86400`}, []headers.Policy{
			{Name: "burst", Quota: 100, Window: time.Minute},
			{Name: "daily", Quota: 1000, Window: 24 * time.Hour},
		}},
		{"all parameters", []string{`"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`}, []headers.Policy{{
			Name: "peruser", Quota: 65535, QuotaUnit: "content-bytes", Window: 10 * time.Second,
			PartitionKey: mustBase64(t, "sdfjLJUOUH"),
		}}},
		{"token name (draft appendix)", []string{`quota;q=100;w=1`}, []headers.Policy{{Name: "quota", Quota: 100, Window: time.Second}}},
		{"no window", []string{`"p";q=3`}, []headers.Policy{{Name: "p", Quota: 3}}},
		{"unknown and vendor parameters ignored", []string{`"p";q=3;acme-burst=4;x="y"`}, []headers.Policy{{Name: "p", Quota: 3}}},
		{"token unit", []string{`"p";q=3;qu=requests`}, []headers.Policy{{Name: "p", Quota: 3, QuotaUnit: "requests"}}},
		{"split over lines", []string{`"a";q=1`, ` "b";q=2;w=2 `}, []headers.Policy{
			{Name: "a", Quota: 1},
			{Name: "b", Quota: 2, Window: 2 * time.Second},
		}},
		{"drafts -05 to -07 integers", []string{`10;w=1, 1000;w=3600`}, []headers.Policy{
			{Quota: 10, Window: time.Second},
			{Quota: 1000, Window: time.Hour},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParsePolicy(tt.lines...)
			require.NoError(t, err, "ParsePolicy(%q)", tt.lines)
			assert.Equal(t, tt.want, got, "ParsePolicy(%q)", tt.lines)
		})
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"not a list", `"a";q=1 "b"`, headers.ErrSyntax},
		{"missing q", `"a";w=1`, headers.ErrSyntax},
		{"decimal q", `"a";q=1.5`, headers.ErrSyntax},
		{"string q", `"a";q="1"`, headers.ErrSyntax},
		{"negative q", `"a";q=-1`, headers.ErrRange},
		{"zero window", `"a";q=1;w=0`, headers.ErrRange},
		{"negative window", `"a";q=1;w=-5`, headers.ErrRange},
		{"window beyond time.Duration", `"a";q=1;w=999999999999999`, headers.ErrRange},
		{"decimal window", `"a";q=1;w=1.5`, headers.ErrSyntax},
		{"pk not bytes", `"a";q=1;pk="x"`, headers.ErrSyntax},
		{"qu integer", `"a";q=1;qu=1`, headers.ErrSyntax},
		{"inner list", `("a");q=1`, headers.ErrSyntax},
		{"boolean name", `?1;q=1`, headers.ErrSyntax},
		{"one bad item spoils the field", `"a";q=1, "b"`, headers.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParsePolicy(tt.in)
			assert.ErrorIs(t, err, tt.want, "ParsePolicy(%q) = %+v", tt.in, got)
			assert.Nil(t, got)
		})
	}
}

func TestParseRateLimit(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  []headers.Limit
	}{
		{"absent", nil, []headers.Limit{}},
		{"draft example", []string{`"default";r=50;t=30`}, []headers.Limit{{Name: "default", Remaining: 50, Reset: 30 * time.Second}}},
		{"no t", []string{`"default";r=999;pk=:dHJpYWwxMjEzMjM=:`}, []headers.Limit{{Name: "default", Remaining: 999, PartitionKey: []byte("trial121323")}}},
		{"token name without r (draft appendix)", []string{`quota;t=1`}, []headers.Limit{{Name: "quota", Reset: time.Second}}},
		{"several lines and items", []string{`"a";r=1;t=1`, `"b";r=2;t=2, c;r=3`}, []headers.Limit{
			{Name: "a", Remaining: 1, Reset: time.Second},
			{Name: "b", Remaining: 2, Reset: 2 * time.Second},
			{Name: "c", Remaining: 3},
		}},
		{"draft -07 dictionary", []string{`limit=100, remaining=50, reset=5`}, []headers.Limit{{Remaining: 50, Reset: 5 * time.Second}}},
		{"draft -07 dictionary, other keys ignored", []string{`remaining=0, reset=9, x=?1`}, []headers.Limit{{Remaining: 0, Reset: 9 * time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParseRateLimit(tt.lines...)
			require.NoError(t, err, "ParseRateLimit(%q)", tt.lines)
			assert.Equal(t, tt.want, got, "ParseRateLimit(%q)", tt.lines)
		})
	}
}

func TestParseRateLimitErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"garbage", `r=1;;`, headers.ErrSyntax},
		{"integer name", `5;r=1`, headers.ErrSyntax},
		{"negative r", `"a";r=-1`, headers.ErrRange},
		{"negative t", `"a";r=1;t=-1`, headers.ErrRange},
		{"decimal r", `"a";r=0.5`, headers.ErrSyntax},
		{"string t", `"a";r=1;t="1"`, headers.ErrSyntax},
		{"pk token", `"a";r=1;pk=abc`, headers.ErrSyntax},
		{"dictionary with unrelated keys only", `x=1, y=2 z`, headers.ErrSyntax},
		{"draft -07 with negative", `limit=100, remaining=-1`, headers.ErrRange},
		{"draft -07 with string", `limit=100, remaining="1"`, headers.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := headers.ParseRateLimit(tt.in)
			assert.ErrorIs(t, err, tt.want, "ParseRateLimit(%q) = %+v", tt.in, got)
			assert.Nil(t, got)
		})
	}
}

func TestPolicyRoundTrip(t *testing.T) {
	in := []headers.Policy{
		{Name: "burst", Quota: 100, Window: time.Minute},
		{Name: `we"ird\name`, Quota: 0, QuotaUnit: "concurrent-requests"},
		{Name: "", Quota: 999999999999999, Window: 9223372036 * time.Second, PartitionKey: []byte{0, 1, 2, 255}},
	}
	s, err := headers.FormatPolicy(in...)
	require.NoError(t, err)
	got, err := headers.ParsePolicy(s)
	require.NoError(t, err, "ParsePolicy(%q)", s)
	assert.Equal(t, in, got, "ParsePolicy(FormatPolicy(%+v))", in)
}

func TestRateLimitRoundTrip(t *testing.T) {
	in := []headers.Limit{
		{Name: "a", Remaining: 0, Reset: 3 * time.Second},
		{Name: "b", Remaining: 999999999999999, Reset: 0, PartitionKey: []byte("k")},
	}
	s, err := headers.FormatRateLimit(in...)
	require.NoError(t, err)
	got, err := headers.ParseRateLimit(s)
	require.NoError(t, err, "ParseRateLimit(%q)", s)
	assert.Equal(t, in, got, "ParseRateLimit(FormatRateLimit(%+v))", in)
}

// mustBase64 decodes unpadded base64, accepting non-zero pad bits as RFC 9651
// asks of byte sequence parsers.
func mustBase64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawStdEncoding.DecodeString(s)
	require.NoError(t, err)
	return b
}
