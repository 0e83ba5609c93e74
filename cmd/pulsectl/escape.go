package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Every string pulsed sends (names, groups, reasons, errors, URLs) is
// escaped before pulsectl prints it as text, so that a newline in a reason
// cannot forge a line of output and an ANSI escape cannot reach the
// terminal. JSON and YAML output need no such care: their encoders escape.

// escape returns s with every character that is not printable written as
// a visible Go escape: a newline as \n, ESC as \x1b, a bidirectional
// override as \u202e, an invalid byte as \xff. Printable text, spaces
// included, is left as it is.
func escape(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !printable(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[0])>>4, 16) + strconv.FormatUint(uint64(s[0])&0xf, 16))
		case printable(r):
			b.WriteString(s[:n])
		default:
			q := strconv.QuoteRuneToASCII(r) // '\n', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}

// escapeLines is escape for a text of several lines, such as the errors of
// a file joined one a line: each line is escaped, and every line after the
// first is indented, so that no line of it can pass for pulsectl's own.
func escapeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = escape(l)
	}
	return strings.Join(lines, "\n  ")
}

// printable is unicode.IsPrint with the space, and without the format
// characters (bidirectional overrides and the like) that IsPrint allows.
func printable(r rune) bool {
	return r == ' ' || unicode.IsPrint(r) && !unicode.Is(unicode.Cf, r)
}

// escaped returns a copy of m with every string in it, map keys and
// nested messages included, escaped for text output.
func escaped[M proto.Message](m M) M {
	c := proto.Clone(m).(M)
	escapeMessage(c.ProtoReflect())
	return c
}

func escapeMessage(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				switch {
				case fd.Kind() == protoreflect.StringKind:
					l.Set(i, protoreflect.ValueOfString(escape(l.Get(i).String())))
				case fd.Message() != nil:
					escapeMessage(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mp := v.Map()
			type kv struct {
				k protoreflect.MapKey
				v protoreflect.Value
			}
			var all []kv
			mp.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				all = append(all, kv{k, v})
				return true
			})
			for _, e := range all {
				k, val := e.k, e.v
				if fd.MapValue().Kind() == protoreflect.StringKind {
					val = protoreflect.ValueOfString(escape(val.String()))
				} else if fd.MapValue().Message() != nil {
					escapeMessage(val.Message())
				}
				if fd.MapKey().Kind() == protoreflect.StringKind {
					if ek := escape(k.String()); ek != k.String() {
						mp.Clear(k)
						k = protoreflect.ValueOfString(ek).MapKey()
					}
				}
				mp.Set(k, val)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(escape(v.String())))
		case fd.Message() != nil:
			escapeMessage(v.Message())
		}
		return true
	})
}
