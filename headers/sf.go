package headers

import (
	"encoding/base64"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file holds a small, complete implementation of the parsing and the
// serialisation algorithms of RFC 9651 (Structured Field Values for HTTP),
// limited to what the rate-limit fields need: Lists and Dictionaries of Items
// with Parameters. Inner Lists, Decimals, Dates and Display Strings are parsed
// (a field that contains them is still well-formed) but never produced.
//
// The parser works on one string holding all field lines of one field joined
// with commas, as RFC 9651 section 4.2 asks. It reports failure with a short
// reason and never panics: every index is checked before use.

// sfKind is the type of a bare item.
type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplay
)

// sfMaxInteger is the largest magnitude an sf-integer can carry (15 digits).
const sfMaxInteger = 999_999_999_999_999

// sfBare is one bare item. Only the fields matching kind are meaningful.
type sfBare struct {
	kind sfKind
	num  int64  // Integer, Date; a Decimal is kept in thousandths
	str  string // String, Token, Display String
	raw  []byte // Byte Sequence
	flag bool   // Boolean
}

// sfParam is one parameter. Keys are unique within a parameter list: a later
// duplicate overwrites the value of the earlier one in place (RFC 9651 4.2.3.2).
type sfParam struct {
	key   string
	value sfBare
}

// sfMember is a List or Dictionary member: an Item, or an Inner List when
// inner is true.
type sfMember struct {
	item   sfBare
	inner  bool
	items  []sfMember // the Items of an Inner List (each with its own params)
	params []sfParam
}

// param returns the value of the parameter named key.
func (m *sfMember) param(key string) (sfBare, bool) {
	for _, p := range m.params {
		if p.key == key {
			return p.value, true
		}
	}
	return sfBare{}, false
}

// sfDictEntry is one Dictionary member with its key.
type sfDictEntry struct {
	key    string
	member sfMember
}

// sfParser holds the unread input.
type sfParser struct {
	s   string
	pos int
}

// sfError is a parse failure; the caller wraps it with ErrSyntax.
type sfError struct {
	pos    int
	reason string
}

func (e *sfError) Error() string {
	return "offset " + strconv.Itoa(e.pos) + ": " + e.reason
}

func (p *sfParser) fail(reason string) error {
	return &sfError{pos: p.pos, reason: reason}
}

func (p *sfParser) eof() bool { return p.pos >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.pos >= len(p.s) {
		return 0
	}
	return p.s[p.pos]
}

func (p *sfParser) skipSP() {
	for p.pos < len(p.s) && p.s[p.pos] == ' ' {
		p.pos++
	}
}

func (p *sfParser) skipOWS() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

// joinFieldLines combines the lines of one field as RFC 9651 4.2 describes.
// Each line is trimmed of the optional whitespace HTTP allows around a field
// value; empty lines contribute nothing.
func joinFieldLines(lines []string) string {
	var parts []string
	for _, l := range lines {
		l = strings.Trim(l, " \t")
		if l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, ", ")
}

// checkASCII rejects input that is not visible ASCII, SP or HTAB; RFC 9651
// parsers work on ASCII only.
func checkASCII(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x7f || (c < 0x20 && c != '\t') {
			return &sfError{pos: i, reason: "character outside visible ASCII"}
		}
	}
	return nil
}

// parseSFList parses a List field (RFC 9651 4.2.1). An empty input is an
// empty list.
func parseSFList(s string) ([]sfMember, error) {
	if err := checkASCII(s); err != nil {
		return nil, err
	}
	p := &sfParser{s: s}
	p.skipSP()
	var members []sfMember
	for !p.eof() {
		m, err := p.parseItemOrInnerList()
		if err != nil {
			return nil, err
		}
		members = append(members, m)
		p.skipOWS()
		if p.eof() {
			break
		}
		if p.peek() != ',' {
			return nil, p.fail("expected ',' between list members")
		}
		p.pos++
		p.skipOWS()
		if p.eof() {
			return nil, p.fail("trailing ',' in list")
		}
	}
	return members, nil
}

// parseSFDictionary parses a Dictionary field (RFC 9651 4.2.2). A key seen
// twice keeps its first position and its last value.
func parseSFDictionary(s string) ([]sfDictEntry, error) {
	if err := checkASCII(s); err != nil {
		return nil, err
	}
	p := &sfParser{s: s}
	p.skipSP()
	var entries []sfDictEntry
	for !p.eof() {
		key, err := p.parseKey()
		if err != nil {
			return nil, err
		}
		var m sfMember
		if p.peek() == '=' {
			p.pos++
			if m, err = p.parseItemOrInnerList(); err != nil {
				return nil, err
			}
		} else {
			m.item = sfBare{kind: sfBoolean, flag: true}
			if m.params, err = p.parseParams(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for i := range entries {
			if entries[i].key == key {
				entries[i].member = m
				replaced = true
				break
			}
		}
		if !replaced {
			entries = append(entries, sfDictEntry{key: key, member: m})
		}
		p.skipOWS()
		if p.eof() {
			break
		}
		if p.peek() != ',' {
			return nil, p.fail("expected ',' between dictionary members")
		}
		p.pos++
		p.skipOWS()
		if p.eof() {
			return nil, p.fail("trailing ',' in dictionary")
		}
	}
	return entries, nil
}

func (p *sfParser) parseItemOrInnerList() (sfMember, error) {
	if p.peek() == '(' {
		return p.parseInnerList()
	}
	return p.parseItem()
}

func (p *sfParser) parseInnerList() (sfMember, error) {
	p.pos++ // '('
	m := sfMember{inner: true}
	for !p.eof() {
		p.skipSP()
		if p.peek() == ')' {
			p.pos++
			params, err := p.parseParams()
			if err != nil {
				return sfMember{}, err
			}
			m.params = params
			return m, nil
		}
		it, err := p.parseItem()
		if err != nil {
			return sfMember{}, err
		}
		m.items = append(m.items, it)
		if c := p.peek(); c != ' ' && c != ')' {
			return sfMember{}, p.fail("expected ' ' or ')' in inner list")
		}
	}
	return sfMember{}, p.fail("unterminated inner list")
}

func (p *sfParser) parseItem() (sfMember, error) {
	bare, err := p.parseBareItem()
	if err != nil {
		return sfMember{}, err
	}
	params, err := p.parseParams()
	if err != nil {
		return sfMember{}, err
	}
	return sfMember{item: bare, params: params}, nil
}

func (p *sfParser) parseParams() ([]sfParam, error) {
	var params []sfParam
	for p.peek() == ';' {
		p.pos++
		p.skipSP()
		key, err := p.parseKey()
		if err != nil {
			return nil, err
		}
		value := sfBare{kind: sfBoolean, flag: true}
		if p.peek() == '=' {
			p.pos++
			if value, err = p.parseBareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for i := range params {
			if params[i].key == key {
				params[i].value = value
				replaced = true
				break
			}
		}
		if !replaced {
			params = append(params, sfParam{key: key, value: value})
		}
	}
	return params, nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool   { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// isTchar reports whether c is a tchar of RFC 9110 5.6.2.
func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isKeyChar(c byte) bool {
	return isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*'
}

func (p *sfParser) parseKey() (string, error) {
	c := p.peek()
	if !isLCAlpha(c) && c != '*' {
		return "", p.fail("key must start with a lowercase letter or '*'")
	}
	start := p.pos
	for p.pos < len(p.s) && isKeyChar(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos], nil
}

func (p *sfParser) parseBareItem() (sfBare, error) {
	c := p.peek()
	switch {
	case c == '-' || isDigit(c):
		return p.parseNumber()
	case c == '"':
		return p.parseString()
	case c == '*' || isAlpha(c):
		return p.parseToken(), nil
	case c == ':':
		return p.parseBytes()
	case c == '?':
		return p.parseBoolean()
	case c == '@':
		return p.parseDate()
	case c == '%':
		return p.parseDisplayString()
	case p.eof():
		return sfBare{}, p.fail("expected a value, found end of input")
	default:
		return sfBare{}, p.fail("unexpected character " + strconv.QuoteRune(rune(c)))
	}
}

// parseNumber follows RFC 9651 4.2.4: at most 15 integer digits for an
// Integer, at most 12 integer and 3 fractional digits for a Decimal.
func (p *sfParser) parseNumber() (sfBare, error) {
	neg := false
	if p.peek() == '-' {
		neg = true
		p.pos++
	}
	if !isDigit(p.peek()) {
		return sfBare{}, p.fail("expected a digit")
	}
	var intPart int64
	intDigits := 0
	for isDigit(p.peek()) {
		intDigits++
		if intDigits > 15 {
			return sfBare{}, p.fail("integer has more than 15 digits")
		}
		intPart = intPart*10 + int64(p.peek()-'0')
		p.pos++
	}
	if p.peek() != '.' {
		if neg {
			intPart = -intPart
		}
		return sfBare{kind: sfInteger, num: intPart}, nil
	}
	if intDigits > 12 {
		return sfBare{}, p.fail("decimal has more than 12 integer digits")
	}
	p.pos++ // '.'
	var frac int64
	fracDigits := 0
	for isDigit(p.peek()) {
		fracDigits++
		if fracDigits > 3 {
			return sfBare{}, p.fail("decimal has more than 3 fractional digits")
		}
		frac = frac*10 + int64(p.peek()-'0')
		p.pos++
	}
	if fracDigits == 0 {
		return sfBare{}, p.fail("decimal ends with '.'")
	}
	for i := fracDigits; i < 3; i++ {
		frac *= 10
	}
	v := intPart*1000 + frac
	if neg {
		v = -v
	}
	return sfBare{kind: sfDecimal, num: v}, nil
}

func (p *sfParser) parseString() (sfBare, error) {
	p.pos++ // '"'
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.pos]
		p.pos++
		switch {
		case c == '\\':
			if p.eof() {
				return sfBare{}, p.fail("string ends inside an escape")
			}
			n := p.s[p.pos]
			if n != '"' && n != '\\' {
				return sfBare{}, p.fail("invalid escape in string")
			}
			p.pos++
			b.WriteByte(n)
		case c == '"':
			return sfBare{kind: sfString, str: b.String()}, nil
		case c < 0x20 || c > 0x7e:
			return sfBare{}, p.fail("invalid character in string")
		default:
			b.WriteByte(c)
		}
	}
	return sfBare{}, p.fail("unterminated string")
}

func (p *sfParser) parseToken() sfBare {
	start := p.pos
	p.pos++ // first character was checked by the caller
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if !isTchar(c) && c != ':' && c != '/' {
			break
		}
		p.pos++
	}
	return sfBare{kind: sfToken, str: p.s[start:p.pos]}
}

// parseBytes decodes a Byte Sequence. As RFC 9651 4.2.7 recommends, missing
// '=' padding and non-zero pad bits are accepted.
func (p *sfParser) parseBytes() (sfBare, error) {
	p.pos++ // ':'
	end := strings.IndexByte(p.s[p.pos:], ':')
	if end < 0 {
		return sfBare{}, p.fail("unterminated byte sequence")
	}
	enc := p.s[p.pos : p.pos+end]
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return sfBare{}, p.fail("invalid character in byte sequence")
		}
	}
	trimmed := strings.TrimRight(enc, "=")
	if strings.IndexByte(trimmed, '=') >= 0 || len(enc)-len(trimmed) > 2 {
		return sfBare{}, p.fail("misplaced '=' in byte sequence")
	}
	raw, err := base64.RawStdEncoding.DecodeString(trimmed)
	if err != nil {
		return sfBare{}, p.fail("invalid base64 in byte sequence")
	}
	p.pos += end + 1
	return sfBare{kind: sfBytes, raw: raw}, nil
}

func (p *sfParser) parseBoolean() (sfBare, error) {
	p.pos++ // '?'
	switch p.peek() {
	case '0':
		p.pos++
		return sfBare{kind: sfBoolean, flag: false}, nil
	case '1':
		p.pos++
		return sfBare{kind: sfBoolean, flag: true}, nil
	}
	return sfBare{}, p.fail("boolean must be ?0 or ?1")
}

func (p *sfParser) parseDate() (sfBare, error) {
	p.pos++ // '@'
	n, err := p.parseNumber()
	if err != nil {
		return sfBare{}, err
	}
	if n.kind != sfInteger {
		return sfBare{}, p.fail("date must be an integer")
	}
	return sfBare{kind: sfDate, num: n.num}, nil
}

func (p *sfParser) parseDisplayString() (sfBare, error) {
	p.pos++ // '%'
	if p.peek() != '"' {
		return sfBare{}, p.fail("display string must start with %\"")
	}
	p.pos++
	var b []byte
	for !p.eof() {
		c := p.s[p.pos]
		p.pos++
		switch {
		case c < 0x20 || c > 0x7e:
			return sfBare{}, p.fail("invalid character in display string")
		case c == '%':
			if p.pos+2 > len(p.s) {
				return sfBare{}, p.fail("truncated percent escape")
			}
			hi, ok1 := lowerHex(p.s[p.pos])
			lo, ok2 := lowerHex(p.s[p.pos+1])
			if !ok1 || !ok2 {
				return sfBare{}, p.fail("invalid percent escape")
			}
			p.pos += 2
			b = append(b, hi<<4|lo)
		case c == '"':
			if !utf8.Valid(b) {
				return sfBare{}, p.fail("display string is not UTF-8")
			}
			return sfBare{kind: sfDisplay, str: string(b)}, nil
		default:
			b = append(b, c)
		}
	}
	return sfBare{}, p.fail("unterminated display string")
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Serialisation (RFC 9651 4.1). Only the shapes the writers need.

// appendSFString appends s as an sf-string, or reports false when s holds a
// character an sf-string cannot carry (anything outside 0x20-0x7E).
func appendSFString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return b, false
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"'), true
}

// appendSFInteger appends v, or reports false when it exceeds 15 digits.
func appendSFInteger(b []byte, v int64) ([]byte, bool) {
	if v > sfMaxInteger || v < -sfMaxInteger {
		return b, false
	}
	return strconv.AppendInt(b, v, 10), true
}

func appendSFBytes(b []byte, raw []byte) []byte {
	b = append(b, ':')
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, ':')
}
