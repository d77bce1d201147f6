package fgprom_test

import (
	"slices"
	"strings"
	"testing"
)

// metricNames returns the metric names a PromQL expression selects, in
// order of appearance, with Grafana's variables ($name, ${name}) allowed
// where PromQL has a string or a duration. It is a tokenizer, not a
// parser: it skips string literals, label matchers ({...}), ranges and
// subqueries ([...]), numbers and durations, the label lists of by,
// without, on, ignoring, group_left and group_right, and keywords; of the
// identifiers left, those followed by "(" are functions and aggregations,
// and the others are metric names. That is exact for the expressions of
// a dashboard and a rules file, which hold no metric names in strings.
func metricNames(expr string) []string {
	var names []string
	s := expr
	for len(s) > 0 {
		c := s[0]
		switch {
		case c == '"' || c == '\'' || c == '`':
			s = skipString(s)
		case c == '{':
			s = skipPast(s, '}')
		case c == '[':
			s = skipPast(s, ']')
		case c == '#':
			s = skipPast(s, '\n')
		case c == '$':
			s = s[1:]
			if strings.HasPrefix(s, "{") {
				s = skipPast(s, '}')
			} else {
				_, s = ident(s)
			}
		case isDigit(c) || c == '.' && len(s) > 1 && isDigit(s[1]):
			i := 0
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
			s = s[i:]
		case isIdentStart(c):
			var id string
			id, s = ident(s)
			rest := strings.TrimLeft(s, " \t\r\n")
			switch kw := strings.ToLower(id); {
			case listKeywords[kw]:
				if strings.HasPrefix(rest, "(") {
					s = skipPast(rest, ')')
				}
			case keywords[kw]:
			case strings.HasPrefix(rest, "("): // a function or an aggregation
			case aggregationClause(rest): // sum by (l) (...)
			default:
				names = append(names, id)
			}
		default:
			s = s[1:]
		}
	}
	return names
}

var (
	// listKeywords take a list of label names in parentheses.
	listKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	keywords     = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true, "atan2": true}
)

// aggregationClause reports whether s starts with by or without and a
// parenthesis: what follows an aggregation's name in "sum by (l) (x)".
func aggregationClause(s string) bool {
	id, rest := ident(s)
	id = strings.ToLower(id)
	return (id == "by" || id == "without") && strings.HasPrefix(strings.TrimLeft(rest, " \t\r\n"), "(")
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
func isIdent(c byte) bool { return isIdentStart(c) || isDigit(c) }

func ident(s string) (string, string) {
	i := 0
	for i < len(s) && isIdent(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

// skipPast returns s after the first end, outside string literals.
func skipPast(s string, end byte) string {
	s = s[1:]
	for len(s) > 0 {
		switch s[0] {
		case end:
			return s[1:]
		case '"', '\'', '`':
			s = skipString(s)
		default:
			s = s[1:]
		}
	}
	return s
}

// skipString returns s after the string literal it starts with.
func skipString(s string) string {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`':
			i++
		case s[i] == q:
			return s[i+1:]
		}
	}
	return ""
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`rate(http_requests_total{job="a",path=~"/x{1,2}"}[5m])`, []string{"http_requests_total"}},
		{`sum by (limiter, op) (rate(a_total{limiter=~"$limiter"}[$__rate_interval]))`, []string{"a_total"}},
		{`sum(rate(a_total[5m])) without (node) / on (store) group_left (x) b`, []string{"a_total", "b"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[1m]))) > 0.5`, []string{"h_bucket"}},
		{`a > bool 1e3 and b offset 5m or c unless d`, []string{"a", "b", "c", "d"}},
		{`label_replace(x, "dst", "$1", "src", "(.*)")`, []string{"x"}},
		{`{__name__="hidden"}`, nil},
		{`rate(a[5m:30s]) # a comment naming nothing_total`, []string{"a"}},
		{`max_over_time(floodgate_breaker_state{store=~"${store}"}[5m]) == 2`, []string{"floodgate_breaker_state"}},
		{`sum by (limiter) (x) / sum by (limiter) (y)`, []string{"x", "y"}},
		{"a\n  / b\n", []string{"a", "b"}},
		{`vector(1) + Inf - NaN`, nil},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
