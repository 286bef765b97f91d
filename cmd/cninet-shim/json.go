package main

import (
	"errors"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The shim reads and writes the little JSON it handles itself: a few
// string members of its config, the code of the daemon's or cninet's CNI
// error, and the request it sends. encoding/json (with reflect behind
// it) would be paid for at each of the shim's starts. What is read here
// reads as encoding/json reads it into a struct of string fields: the
// whole input must be valid JSON, a member name matches a field's
// case-folded, the last match wins, null leaves a field as it was, and
// invalid UTF-8 in a string reads as U+FFFD (FuzzReadConfig holds it to
// that).

// jsonMember is one member of a JSON object: its name, unescaped, and
// its value as it is written.
type jsonMember struct {
	name  string
	value []byte
}

// errNotObject: valid JSON that is not an object.
var errNotObject = errors.New("not a JSON object")

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

// readObject reads data as one JSON value and returns the members of
// the object it is, in order; null is an object without members, any
// other value errNotObject, invalid JSON an error saying where.
func readObject(data []byte) ([]jsonMember, error) {
	s := &jsonScan{data: data}
	s.space()
	if s.i < len(s.data) && s.data[s.i] == 'n' {
		if err := s.value(); err != nil {
			return nil, err
		}
		return nil, s.end()
	}
	if s.i < len(s.data) && s.data[s.i] == '{' {
		var members []jsonMember
		if err := s.object(&members); err != nil {
			return nil, err
		}
		return members, s.end()
	}
	if err := s.value(); err != nil {
		return nil, err
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	return nil, errNotObject
}

// jsonScan checks JSON syntax from data[i:].
type jsonScan struct {
	data  []byte
	i     int
	depth int
}

func (s *jsonScan) fail(what string) error {
	if s.i >= len(s.data) {
		return errors.New("unexpected end of JSON input, want " + what)
	}
	return errors.New("invalid character " + strconv.QuoteRune(rune(s.data[s.i])) + " at offset " + strconv.Itoa(s.i) + ", want " + what)
}

func (s *jsonScan) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// end wants nothing but white space after the value.
func (s *jsonScan) end() error {
	s.space()
	if s.i < len(s.data) {
		return s.fail("the end after the top-level value")
	}
	return nil
}

func (s *jsonScan) value() error {
	s.space()
	if s.i >= len(s.data) {
		return s.fail("a value")
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return s.object(nil)
	case c == '[':
		return s.array()
	case c == '"':
		return s.skipString()
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail("a value")
}

func (s *jsonScan) enter() error {
	if s.depth++; s.depth > maxJSONDepth {
		return errors.New("exceeded max depth")
	}
	return nil
}

// object reads an object at s.i, appending its members to members when
// that is not nil.
func (s *jsonScan) object(members *[]jsonMember) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.i++ // '{'
	s.space()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return s.fail("a member name")
		}
		start := s.i
		if err := s.skipString(); err != nil {
			return err
		}
		name := s.data[start:s.i]
		s.space()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return s.fail("':' after a member name")
		}
		s.i++
		s.space()
		vstart := s.i
		if err := s.value(); err != nil {
			return err
		}
		if members != nil {
			*members = append(*members, jsonMember{name: unquote(name), value: s.data[vstart:s.i]})
		}
		s.space()
		if s.i < len(s.data) && s.data[s.i] == ',' {
			s.i++
			continue
		}
		if s.i < len(s.data) && s.data[s.i] == '}' {
			s.i++
			s.depth--
			return nil
		}
		return s.fail("',' or '}' in an object")
	}
}

func (s *jsonScan) array() error {
	if err := s.enter(); err != nil {
		return err
	}
	s.i++ // '['
	s.space()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := s.value(); err != nil {
			return err
		}
		s.space()
		if s.i < len(s.data) && s.data[s.i] == ',' {
			s.i++
			continue
		}
		if s.i < len(s.data) && s.data[s.i] == ']' {
			s.i++
			s.depth--
			return nil
		}
		return s.fail("',' or ']' in an array")
	}
}

// skipString steps over the string at s.i, checking its escapes.
func (s *jsonScan) skipString() error {
	s.i++ // '"'
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return nil
		case c == '\\':
			s.i++
			if s.i >= len(s.data) {
				return s.fail("an escape")
			}
			switch s.data[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(s.data) || !isHex(s.data[s.i]) {
						return s.fail("a hexadecimal digit in a \\u escape")
					}
					s.i++
				}
			default:
				return s.fail("an escape")
			}
		case c < 0x20:
			return s.fail("no control character in a string")
		default:
			s.i++
		}
	}
	return s.fail("the end of a string")
}

func (s *jsonScan) number() error {
	digits := func() int {
		n := 0
		for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.data[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.data) && s.data[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return s.fail("a digit")
	}
	if s.i < len(s.data) && s.data[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return s.fail("a digit after '.'")
		}
	}
	if s.i < len(s.data) && (s.data[s.i] == 'e' || s.data[s.i] == 'E') {
		s.i++
		if s.i < len(s.data) && (s.data[s.i] == '+' || s.data[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return s.fail("a digit in an exponent")
		}
	}
	return nil
}

func (s *jsonScan) literal(word string) error {
	for j := range len(word) {
		if s.i >= len(s.data) || s.data[s.i] != word[j] {
			return s.fail("the literal " + word)
		}
		s.i++
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// unquote is the text of a string whose syntax was checked, quotes
// included: escapes resolved, a lone or broken UTF-16 surrogate and each
// byte of invalid UTF-8 read as U+FFFD.
func unquote(q []byte) string {
	q = q[1 : len(q)-1]
	out := make([]byte, 0, len(q))
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\\':
			i++
			switch q[i] {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(q[i+1:])
				i += 5
				if utf16.IsSurrogate(r) {
					first := r
					r = unicode.ReplacementChar
					if i+6 <= len(q) && q[i] == '\\' && q[i+1] == 'u' && isHex4(q[i+2:i+6]) {
						if dec := utf16.DecodeRune(first, hex4(q[i+2:])); dec != unicode.ReplacementChar {
							r = dec
							i += 6
						}
					}
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // '"', '\\', '/'
				out = append(out, q[i])
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(q[i:])
			out = utf8.AppendRune(out, r) // U+FFFD for an invalid byte
			i += n
		}
	}
	return string(out)
}

func isHex4(b []byte) bool {
	return len(b) >= 4 && isHex(b[0]) && isHex(b[1]) && isHex(b[2]) && isHex(b[3])
}

// hex4 is the value of the 4 hexadecimal digits b starts with.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// errNotString: a member's value is neither a string nor null.
var errNotString = errors.New("not a string")

// stringMember is the value of field name among members as
// encoding/json reads it into a string field: that of the last member
// whose name folds to name and is not null. A matching member of another
// type is errNotString.
func stringMember(members []jsonMember, name string) (string, error) {
	var value string
	var err error
	for _, m := range members {
		if !equalFold(m.name, name) {
			continue
		}
		switch m.value[0] {
		case '"':
			value = unquote(m.value)
		case 'n': // null leaves the field as it was
		default:
			err = errors.New("member " + strconv.Quote(m.name) + ": " + string(m.value) + " is " + errNotString.Error())
		}
	}
	return value, err
}

// equalFold says whether a and b fold to the same name as
// encoding/json folds member names: ASCII letters by case, other runes
// to the least rune of their Unicode case orbit.
func equalFold(a, b string) bool {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if foldRune(ra) != foldRune(rb) {
			return false
		}
		a, b = a[na:], b[nb:]
	}
	return a == b
}

func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			r -= 'a' - 'A'
		}
		return r
	}
	for {
		next := unicode.SimpleFold(r)
		if next <= r {
			return next
		}
		r = next
	}
}

// appendString appends s as a JSON string, escaped as encoding/json
// escapes it: quotes, backslashes, control characters, '<', '>', '&',
// U+2028 and U+2029; invalid UTF-8 as U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
