package headers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSFList(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []sfMember
	}{
		{"empty", "", nil},
		{"only spaces", "   ", nil},
		{"token", "a", []sfMember{{item: sfBare{kind: sfToken, str: "a"}}}},
		{"string with escapes", `"a\"b\\c"`, []sfMember{{item: sfBare{kind: sfString, str: `a"b\c`}}}},
		{"integer and decimal", "-42, 1.5", []sfMember{
			{item: sfBare{kind: sfInteger, num: -42}},
			{item: sfBare{kind: sfDecimal, num: 1500}},
		}},
		{"max integer", "999999999999999", []sfMember{{item: sfBare{kind: sfInteger, num: sfMaxInteger}}}},
		{"params", `"p";q=10;w=60;flag`, []sfMember{{
			item: sfBare{kind: sfString, str: "p"},
			params: []sfParam{
				{"q", sfBare{kind: sfInteger, num: 10}},
				{"w", sfBare{kind: sfInteger, num: 60}},
				{"flag", sfBare{kind: sfBoolean, flag: true}},
			},
		}}},
		{"duplicate param keeps position, takes last value", "a;x=1;y=2;x=3", []sfMember{{
			item: sfBare{kind: sfToken, str: "a"},
			params: []sfParam{
				{"x", sfBare{kind: sfInteger, num: 3}},
				{"y", sfBare{kind: sfInteger, num: 2}},
			},
		}}},
		{"space after semicolon", "a; x=1", []sfMember{{
			item:   sfBare{kind: sfToken, str: "a"},
			params: []sfParam{{"x", sfBare{kind: sfInteger, num: 1}}},
		}}},
		{"byte sequence", ":aGVsbG8=:", []sfMember{{item: sfBare{kind: sfBytes, raw: []byte("hello")}}}},
		{"byte sequence without padding", ":aGVsbG8:", []sfMember{{item: sfBare{kind: sfBytes, raw: []byte("hello")}}}},
		{"booleans", "?0, ?1", []sfMember{
			{item: sfBare{kind: sfBoolean, flag: false}},
			{item: sfBare{kind: sfBoolean, flag: true}},
		}},
		{"date", "@1659578233", []sfMember{{item: sfBare{kind: sfDate, num: 1659578233}}}},
		{"display string", `%"f%c3%bc"`, []sfMember{{item: sfBare{kind: sfDisplay, str: "fü"}}}},
		{"token with colon and slash", "text/html:x", []sfMember{{item: sfBare{kind: sfToken, str: "text/html:x"}}}},
		{"inner list", `("a" b);p=1, c`, []sfMember{
			{
				inner: true,
				items: []sfMember{
					{item: sfBare{kind: sfString, str: "a"}},
					{item: sfBare{kind: sfToken, str: "b"}},
				},
				params: []sfParam{{"p", sfBare{kind: sfInteger, num: 1}}},
			},
			{item: sfBare{kind: sfToken, str: "c"}},
		}},
		{"tabs around commas", "a\t,\tb", []sfMember{
			{item: sfBare{kind: sfToken, str: "a"}},
			{item: sfBare{kind: sfToken, str: "b"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSFList(tt.in)
			require.NoError(t, err, "parseSFList(%q)", tt.in)
			assert.Equal(t, tt.want, got, "parseSFList(%q)", tt.in)
		})
	}
}

func TestParseSFListErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"trailing comma", "a,"},
		{"empty member", "a,,b"},
		{"missing comma", "a b"},
		{"16-digit integer", "1000000000000000"},
		{"decimal with 4 fractional digits", "1.2345"},
		{"decimal with 13 integer digits", "1234567890123.1"},
		{"decimal ending with dot", "1."},
		{"lone minus", "-"},
		{"unterminated string", `"abc`},
		{"bad escape", `"a\b"`},
		{"control character in string", "\"a\x01\""},
		{"non-ASCII", "café"},
		{"uppercase key", "a;Q=1"},
		{"key starting with digit", "a;1=1"},
		{"bad boolean", "?2"},
		{"unterminated byte sequence", ":abc"},
		{"bad base64 character", ":ab$c:"},
		{"misplaced padding", ":a=bc:"},
		{"decimal date", "@1.5"},
		{"display string with uppercase hex", `%"%C3%BC"`},
		{"display string not UTF-8", `%"%ff"`},
		{"unterminated inner list", "(a b"},
		{"inner list without separator", `("a""b")`},
		{"parameter without value after equals", "a;x="},
		{"unexpected character", "a, =b"},
		{"newline", "a\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSFList(tt.in)
			assert.Error(t, err, "parseSFList(%q) = %v, want an error", tt.in, got)
		})
	}
}

func TestParseSFDictionary(t *testing.T) {
	got, err := parseSFDictionary("limit=100, remaining=50, reset=5;x, flag, limit=7")
	require.NoError(t, err)
	want := []sfDictEntry{
		{"limit", sfMember{item: sfBare{kind: sfInteger, num: 7}}},
		{"remaining", sfMember{item: sfBare{kind: sfInteger, num: 50}}},
		{"reset", sfMember{
			item:   sfBare{kind: sfInteger, num: 5},
			params: []sfParam{{"x", sfBare{kind: sfBoolean, flag: true}}},
		}},
		{"flag", sfMember{item: sfBare{kind: sfBoolean, flag: true}}},
	}
	assert.Equal(t, want, got)

	for _, in := range []string{`"a"=1`, "a=1,", "a=1 b=2", "A=1"} {
		_, err := parseSFDictionary(in)
		assert.Error(t, err, "parseSFDictionary(%q) succeeded, want an error", in)
	}
}

func TestJoinFieldLines(t *testing.T) {
	assert.Equal(t, `a, b;x=1, c`, joinFieldLines([]string{" a ", "", "\tb;x=1", "c"}))
	assert.Equal(t, "", joinFieldLines(nil))
}

func TestAppendSF(t *testing.T) {
	b, ok := appendSFString(nil, `a"b\c`)
	assert.True(t, ok)
	assert.Equal(t, `"a\"b\\c"`, string(b))
	_, ok = appendSFString(nil, "caf\u00e9")
	assert.False(t, ok, "appendSFString accepted non-ASCII")
	_, ok = appendSFInteger(nil, sfMaxInteger+1)
	assert.False(t, ok, "appendSFInteger accepted 16 digits")
	assert.Equal(t, ":aGVsbG8=:", string(appendSFBytes(nil, []byte("hello"))))
}
