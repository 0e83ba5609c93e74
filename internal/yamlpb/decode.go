// Package yamlpb decodes YAML into Pulse's API messages by their fields'
// names, as a targets file and a discovery template are written:
//
//	targets:
//	  - name: web-1
//	    http: {url: "http://127.0.0.1:8080/healthz", headers: {Host: example.com}}
//	    interval: 1m30s
//	    rise: 2
//	    model: MODEL_THREE_STATE
//
// A field is named as in the .proto file or by its JSON name (flap_threshold
// or flapThreshold). A duration is a string of numbers with units (h, m, s,
// ms, us, ns: "1m30s", "0.5s"), as wide as google.protobuf.Duration; an
// integer is decimal, 0x hex, 0o octal, 0b binary, a float with no fraction
// ("1e3") or a byte size ("4Ki"); an enum is its value's name or number.
//
// It takes the kinds of field those messages have (strings, booleans,
// 32- and 64-bit integers, enums, durations, messages, lists, maps) and
// refuses any other. Each error names the path, line and column, then
// quotes the line with a marker under the column; every error found is
// returned, joined. The same rules, and the same errors, as the protoyaml
// library, which pulsectl uses; a test holds the two to the same answers.
package yamlpb

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Unmarshal decodes data, one YAML document, into m. path names data in
// the errors.
func Unmarshal(path string, data []byte, m proto.Message) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Kind == 0 {
		return nil
	}
	node := &doc
	if node.Kind == yaml.DocumentNode {
		if len(node.Content) != 1 {
			return errors.New("expected exactly one node in document")
		}
		node = node.Content[0]
	}
	d := &decoder{path: path, lines: lineBreaks.Split(string(data), -1)}
	d.message(node, m.ProtoReflect())
	return errors.Join(d.errs...)
}

// lineBreaks are YAML's: a line may end in CR LF, LF or CR alone, and the
// quoted line of an error is the one the node's line number counts to.
var lineBreaks = regexp.MustCompile("\r\n|\r|\n")

type decoder struct {
	path  string
	lines []string
	errs  []error
}

// nodeError is an error at a node: "path:line:column what", then the line
// quoted and a marker under the column.
type nodeError struct {
	path, line string
	node       *yaml.Node
	err        error
}

func (e *nodeError) Unwrap() error { return e.err }

func (e *nodeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d %s\n", e.path, e.node.Line, e.node.Column, e.err)
	if e.line != "" {
		n := fmt.Sprintf("%4d", e.node.Line)
		fmt.Fprintf(&b, "%s | %s\n", n, e.line)
		fmt.Fprintf(&b, "%s | %s^\n", n, strings.Repeat(".", e.node.Column-1))
	}
	return b.String()
}

func (d *decoder) fail(node *yaml.Node, format string, args ...any) {
	e := &nodeError{path: d.path, node: node, err: fmt.Errorf(format, args...)}
	if i := node.Line - 1; i >= 0 && i < len(d.lines) {
		e.line = d.lines[i]
	}
	d.errs = append(d.errs, e)
}

// is reports whether node is of kind k, and says so if not.
func (d *decoder) is(node *yaml.Node, k yaml.Kind) bool {
	if node.Kind != k {
		d.fail(node, "expected %v, got %v", kindName(k), kindName(node.Kind))
		return false
	}
	return true
}

// scalar reports whether node is a scalar, and says so if not.
func (d *decoder) scalar(node *yaml.Node) bool { return d.is(node, yaml.ScalarNode) }

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.DocumentNode:
		return "document"
	case yaml.SequenceNode:
		return "sequence"
	case yaml.MappingNode:
		return "mapping"
	case yaml.ScalarNode:
		return "scalar"
	case yaml.AliasNode:
		return "alias"
	}
	return fmt.Sprintf("unknown(%d)", k)
}

func isNull(node *yaml.Node) bool { return node.Tag == "!!null" }

const durationName = "google.protobuf.Duration"

func (d *decoder) message(node *yaml.Node, m protoreflect.Message) {
	desc := m.Descriptor()
	if desc.FullName() == durationName && node.Kind == yaml.ScalarNode && node.Value != "" && !isNull(node) {
		dur, err := parseDuration(node.Value)
		if err != nil {
			d.fail(node, "%v", err)
			return
		}
		m.Set(desc.Fields().ByName("seconds"), protoreflect.ValueOfInt64(dur.GetSeconds()))
		m.Set(desc.Fields().ByName("nanos"), protoreflect.ValueOfInt32(dur.GetNanos()))
		return
	}
	if isNull(node) {
		return
	}
	if node.Kind != yaml.MappingNode {
		d.fail(node, "expected fields for %v, got %v", desc.FullName(), kindName(node.Kind))
		return
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key := node.Content[i]
		var name string
		switch {
		case key.Kind == yaml.ScalarNode:
			name = key.Value
		case key.Kind == yaml.SequenceNode && len(key.Content) == 1 && key.Content[0].Kind == yaml.ScalarNode:
			name = "[" + key.Content[0].Value + "]" // an extension's name
		default:
			d.scalar(key)
			continue
		}
		f, err := findField(name, desc)
		if err != nil {
			d.fail(key, "%v", err)
			continue
		}
		if f == nil {
			d.fail(key, "%w", newUnknownFieldError(name, desc))
			continue
		}
		d.field(node.Content[i+1], f, m)
	}
}

// findField finds a field by its JSON name, its name, or its number; nil
// if there is none. A key in brackets names an extension, which these
// messages do not take.
func findField(key string, desc protoreflect.MessageDescriptor) (protoreflect.FieldDescriptor, error) {
	if strings.HasPrefix(key, "[") && strings.HasSuffix(key, "]") {
		x, err := protoregistry.GlobalTypes.FindExtensionByName(protoreflect.FullName(key[1 : len(key)-1]))
		if err != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("message %v cannot be extended by %v", desc.FullName(), x.TypeDescriptor().FullName())
	}
	fields := desc.Fields()
	if f := fields.ByJSONName(key); f != nil {
		return f, nil
	}
	if f := fields.ByTextName(key); f != nil {
		return f, nil
	}
	if n, err := strconv.ParseInt(key, 10, 32); err == nil && n > 0 {
		return fields.ByNumber(protoreflect.FieldNumber(n)), nil
	}
	return nil, nil
}

// UnknownFieldError is the error at a key that names no field of its
// message, so that a caller can say which field was meant. Its text is
// protoyaml's, naming the first few fields only.
type UnknownFieldError struct {
	// Field is the key as written.
	Field string
	// Fields are the names of every field of the message.
	Fields []string
	msg    string
}

func newUnknownFieldError(key string, desc protoreflect.MessageDescriptor) *UnknownFieldError {
	fields := desc.Fields()
	e := &UnknownFieldError{Field: key, msg: fmt.Sprintf("unknown field %#v, expected one of %v", key, firstNames(fields.Len(), fields.Get))}
	for i := range fields.Len() {
		e.Fields = append(e.Fields, string(fields.Get(i).Name()))
	}
	return e
}

func (e *UnknownFieldError) Error() string { return e.msg }

// firstNames lists the names of the first of n fields or enum values,
// for an error.
func firstNames[D interface{ Name() protoreflect.Name }](n int, get func(int) D) []protoreflect.Name {
	var names []protoreflect.Name
	for i := range n {
		names = append(names, get(i).Name())
		if i > 5 {
			names = append(names, "...")
			break
		}
	}
	return names
}

func (d *decoder) field(node *yaml.Node, f protoreflect.FieldDescriptor, m protoreflect.Message) {
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		if set := m.WhichOneof(o); set != nil {
			d.fail(node, "field %v is already set for oneof %v", set.Name(), o.Name())
			return
		}
	}
	switch {
	case f.IsList():
		if !d.is(node, yaml.SequenceNode) {
			return
		}
		list := m.Mutable(f).List()
		for _, item := range node.Content {
			if f.Message() != nil {
				v := list.NewElement()
				d.message(item, v.Message())
				list.Append(v)
			} else if v, ok := d.value(item, f, false); ok {
				list.Append(v)
			}
		}
	case f.IsMap():
		if !d.is(node, yaml.MappingNode) {
			return
		}
		mp := m.Mutable(f).Map()
		for i := 1; i < len(node.Content); i += 2 {
			k, ok := d.value(node.Content[i-1], f.MapKey(), true)
			if !ok {
				continue
			}
			if f.MapValue().Message() != nil {
				v := mp.NewValue()
				d.message(node.Content[i], v.Message())
				mp.Set(k.MapKey(), v)
			} else if v, ok := d.value(node.Content[i], f.MapValue(), false); ok {
				mp.Set(k.MapKey(), v)
			}
		}
	case f.Message() != nil:
		d.message(node, m.Mutable(f).Message())
	default:
		if v, ok := d.value(node, f, false); ok {
			m.Set(f, v)
		}
	}
}

// value decodes a scalar field's value (a map's key if forKey).
func (d *decoder) value(node *yaml.Node, f protoreflect.FieldDescriptor, forKey bool) (protoreflect.Value, bool) {
	switch f.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(d.boolean(node, forKey)), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(d.integer(node, 32))), true
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(d.integer(node, 64)), true
	case protoreflect.StringKind:
		d.scalar(node)
		return protoreflect.ValueOfString(node.Value), true
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(d.enum(node, f)), true
	}
	d.fail(node, "unimplemented scalar type %v", f.Kind())
	return protoreflect.Value{}, false
}

func (d *decoder) boolean(node *yaml.Node, forKey bool) bool {
	if !d.scalar(node) {
		return false
	}
	if node.Value != "true" && node.Value != "false" {
		d.fail(node, "expected bool, got %#v", node.Value)
		return false
	}
	if !forKey && node.Tag != "" && node.Tag != "!!bool" {
		d.fail(node, "expected tag %v, got %v", "!!bool", node.Tag)
	}
	return node.Value == "true"
}

func (d *decoder) integer(node *yaml.Node, bits int) int64 {
	if !d.scalar(node) {
		return 0
	}
	neg, u, err := parseInt(node.Value, true)
	if err != nil {
		d.fail(node, "invalid integer: %v", err)
	}
	if neg {
		if u <= 1<<(bits-1) {
			return -int64(u)
		}
		d.fail(node, "integer is too small: < %v", -(1 << (bits - 1)))
	} else if u >= 1<<(bits-1) {
		d.fail(node, "integer is too large: > %v", 1<<(bits-1)-1)
	}
	return int64(u)
}

func (d *decoder) enum(node *yaml.Node, f protoreflect.FieldDescriptor) protoreflect.EnumNumber {
	d.scalar(node)
	values := f.Enum().Values()
	if v := values.ByName(protoreflect.Name(node.Value)); v != nil {
		return v.Number()
	}
	neg, u, err := parseInt(node.Value, false)
	switch {
	case err != nil:
		d.fail(node, "unknown enum value %#v, expected one of %v", node.Value, firstNames(values.Len(), values.Get))
		return 0
	case neg && u > 1<<31 || !neg && u >= 1<<31:
		d.fail(node, "expected int32 for %v, got int64, expected one of %v", f.FullName(), firstNames(values.Len(), values.Get))
		return 0
	case neg:
		return -protoreflect.EnumNumber(u)
	}
	return protoreflect.EnumNumber(u)
}

// parseInt parses an integer, its sign apart (see parseUint).
func parseInt(s string, bytes bool) (neg bool, u uint64, err error) {
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	u, err = parseUint(s, bytes)
	return neg, u, err
}

// parseUint parses an unsigned integer: decimal, 0x, 0o or 0b; a float
// that is a whole number below 2^53; and, if bytes, a byte size (1Ki, 2M).
func parseUint(s string, bytes bool) (uint64, error) {
	base, digits := 10, s
	if len(s) >= 2 && s[0] == '0' {
		switch s[1] {
		case 'x', 'X':
			base, digits = 16, s[2:]
		case 'o', 'O':
			base, digits = 8, s[2:]
		case 'b', 'B':
			base, digits = 2, s[2:]
		}
	}
	u, uerr := strconv.ParseUint(digits, base, 64)
	if uerr == nil {
		return u, nil
	}
	if f, ferr := strconv.ParseFloat(s, 64); ferr == nil {
		if f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return 0, uerr
		}
		if u = uint64(f); float64(u) != f || u >= 1<<53 {
			return u, errors.New("precision loss")
		}
		return u, nil
	}
	if !bytes {
		return 0, uerr
	}
	n := new(big.Int)
	rest, err := byteUnits.add(s, n)
	switch {
	case err != nil:
		return 0, err
	case rest != "":
		return 0, uerr
	case n.BitLen() > 64:
		return 0, errors.New("integer is too large")
	}
	return n.Uint64(), nil
}

// A unitSet is the units of a duration or of a byte size, each with what
// it is worth.
type unitSet struct {
	what   string   // what a wrong number is called in errors
	names  []string // the units, as errors list them
	values map[string]*big.Int
	// exact, for a duration: the unit is required, and a fraction must
	// come to a whole number of the smallest unit (a byte size's is
	// rounded down).
	exact bool
}

var (
	durationUnits = unitSet{
		what:  "invalid duration",
		names: []string{"h", "m", "s", "ms", "us", "ns"},
		values: map[string]*big.Int{
			"h": big.NewInt(int64(time.Hour)), "m": big.NewInt(int64(time.Minute)), "s": big.NewInt(int64(time.Second)),
			"ms": big.NewInt(int64(time.Millisecond)), "us": big.NewInt(int64(time.Microsecond)),
			"µs": big.NewInt(int64(time.Microsecond)), "μs": big.NewInt(int64(time.Microsecond)), "ns": big.NewInt(1),
		},
		exact: true,
	}
	byteUnits = unitSet{
		what:  "invalid bytes",
		names: []string{"k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"},
		values: map[string]*big.Int{
			"k": big.NewInt(1e3), "M": big.NewInt(1e6), "G": big.NewInt(1e9), "T": big.NewInt(1e12),
			"P": big.NewInt(1e15), "E": big.NewInt(1e18), "Ki": big.NewInt(1 << 10), "Mi": big.NewInt(1 << 20),
			"Gi": big.NewInt(1 << 30), "Ti": big.NewInt(1 << 40), "Pi": big.NewInt(1 << 50), "Ei": big.NewInt(1 << 60),
		},
	}
)

// parseDuration parses a duration: an optional sign, then numbers each with
// its unit ("1h30m", "0.5s"), or "0"; it spans google.protobuf.Duration.
func parseDuration(s string) (*durationpb.Duration, error) {
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "0" {
		return nil, nil
	}
	if s == "" {
		return nil, errors.New("invalid duration")
	}
	nanos := new(big.Int)
	for s != "" {
		var err error
		if s, err = durationUnits.add(s, nanos); err != nil {
			return nil, err
		}
	}
	if neg {
		nanos.Neg(nanos)
	}
	secs, rem := nanos.QuoRem(nanos, big.NewInt(int64(time.Second)), new(big.Int))
	if !secs.IsInt64() {
		return nil, errors.New("invalid duration: out of range")
	}
	return &durationpb.Duration{Seconds: secs.Int64(), Nanos: int32(rem.Int64())}, nil
}

// add adds to total one number and its unit from the start of s and
// returns the rest.
func (us unitSet) add(s string, total *big.Int) (string, error) {
	whole, frac, scale, name, rest, err := numberWithUnit(s)
	if err != nil {
		return "", err
	}
	if us.exact && name == "" {
		return "", fmt.Errorf("%s: missing unit, expected one of %v", us.what, us.names)
	}
	per, ok := us.values[name]
	if !ok {
		return "", fmt.Errorf("%s: unknown unit, expected one of %v", us.what, us.names)
	}
	if whole > 0 {
		total.Add(total, new(big.Int).Mul(new(big.Int).SetUint64(whole), per))
	}
	if frac > 0 {
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(new(big.Int).SetUint64(frac), per), scale, new(big.Int))
		if r.Sign() > 0 && us.exact {
			return "", fmt.Errorf("%s: fractional nanos", us.what)
		}
		total.Add(total, q)
	}
	return rest, nil
}

// numberWithUnit reads a number ("12", "1.5", ".5") and the unit after it
// (up to the next digit, dot or minus) from the start of s.
func numberWithUnit(s string) (whole, frac uint64, scale *big.Int, name, rest string, err error) {
	if s == "" {
		return 0, 0, nil, "", s, errors.New("expected number")
	}
	if s[0] != '.' && (s[0] < '0' || s[0] > '9') {
		return 0, 0, nil, "", s, errors.New("invalid number, expected digit")
	}
	i := 0
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		next := whole*10 + uint64(s[i]-'0')
		if next < whole {
			return 0, 0, nil, "", s, errors.New("integer overflow")
		}
		whole = next
	}
	pre, post := i > 0, false
	s = s[i:]
	if s != "" && s[0] == '.' {
		s = s[1:]
		scale = big.NewInt(1)
		overflow := false
		j := 0
		for ; j < len(s) && '0' <= s[j] && s[j] <= '9'; j++ {
			if overflow || frac > (1<<63-1)/10 {
				overflow = true
				continue
			}
			next := frac*10 + uint64(s[j]-'0')
			if next > 1<<63 {
				overflow = true
				continue
			}
			frac = next
			scale.Mul(scale, big.NewInt(10))
		}
		s, post = s[j:], j > 0
	}
	if !pre && !post {
		return whole, frac, scale, "", s, errors.New("invalid number, expected digit")
	}
	end := 0
	for ; end < len(s); end++ {
		if c := s[end]; c == '.' || c == '-' || '0' <= c && c <= '9' {
			break
		}
	}
	return whole, frac, scale, s[:end], s[end:], nil
}
