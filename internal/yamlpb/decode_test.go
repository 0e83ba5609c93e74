package yamlpb_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"buf.build/go/protoyaml"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/yamlpb"
)

// sameAsProtoyaml decodes data both ways, into a TargetsFile and into a
// Target (a discovery template), and fails unless both give the same
// message or the same error, to the letter.
func sameAsProtoyaml(t *testing.T, data string) {
	t.Helper()
	for _, m := range []proto.Message{&pb.TargetsFile{}, &pb.Target{}} {
		want, got := m, proto.Clone(m)
		werr, panicked := protoyamlUnmarshal(data, want)
		gerr := yamlpb.Unmarshal("f.yaml", []byte(data), got)
		switch {
		case panicked:
			// protoyaml panics on an error whose node YAML puts on a
			// line the text does not have: after lines a CR alone ends
			// (it splits at LF alone), or the empty value of "? key"
			// on the line after the last.
			if gerr == nil {
				t.Errorf("%T from %q: protoyaml panicked, yamlpb: %v", m, data, gerr)
			}
		case (werr == nil) != (gerr == nil) || werr != nil && quoted(data, werr) != quoted(data, gerr):
			t.Errorf("%T from\n%s\nprotoyaml: %v\nyamlpb:    %v", m, data, werr, gerr)
		case werr == nil && !proto.Equal(want, got):
			t.Errorf("%T from\n%s\nprotoyaml: %v\nyamlpb:    %v", m, data, want, got)
		}
	}
}

// quoted is err's message; without the lines it quotes when data has a
// CR: protoyaml quotes from the text split at LF alone, so it keeps a CR
// LF line's CR in its quote, and after a CR alone it quotes the wrong
// line, or none.
func quoted(data string, err error) string {
	if !strings.ContainsRune(data, '\r') {
		return err.Error()
	}
	var keep []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if !quoteLine.MatchString(l) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

var quoteLine = regexp.MustCompile(`^ *[0-9]+ \| `)

// protoyamlUnmarshal is protoyaml's answer, and whether it panicked.
func protoyamlUnmarshal(data string, m proto.Message) (err error, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	return protoyaml.UnmarshalOptions{Path: "f.yaml"}.Unmarshal([]byte(data), m), false
}

// values are what a field's value is written as, right and wrong.
var values = []string{
	`1`, `-1`, `0`, `7`, `"7"`, `0x1f`, `0X1F`, `0o17`, `0b101`, `017`, `1e3`, `1.5`, `-1e3`, `1e400`, `.5`,
	`2Ki`, `1.5Ki`, `3M`, `1Ei`, `20Ei`, `12abc`, `many`, `99999999999999999999`, `2147483647`, `2147483648`,
	`-2147483648`, `-2147483649`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775809`,
	`true`, `false`, `"true"`, `True`, `yes`, `~`, `null`, `""`, `''`, `[1]`, `[]`, `{a: 1}`, `{}`, `[a, b]`,
	`1s`, `1m30s`, `0.5s`, `-1s`, `+2h`, `1h-1m`, `.5s`, `1.s`, `.s`, `1ns`, `5us`, `5µs`, `5μs`, `1.0000000001s`,
	`100000000000s`, `999999999999h`, `1d`, `1`, `1.5h`, `0s`, `-0`, `+0`, `-`, `s`, `10ms500us`,
	`THREE_STATE`, `MODEL_THREE_STATE`, `HEALTHY`, `STATE_HEALTHY`, `3`, `-3`, `5000000000`, `0x7fffffff`,
	`"http://127.0.0.1:1/"`, `{Host: a, X-Y: "b"}`, `{1: a}`, `{true: a}`, `[{name: X, regex: "^a$"}]`,
	`{send: a, expect: b}`, `[{send: a}, {send_hex: "0a"}]`, `{seconds: 3, nanos: 5}`, `{seconds: x}`,
	`&a 1`, `*a`, `!!str 1`, `!!int "1"`, `!!binary aGk=`,
}

// fieldsOf lists the paths of every field under a Target, to write each
// with every value above.
func fieldsOf(md protoreflect.MessageDescriptor, prefix []string, depth int, out *[][]string) {
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		path := append(append([]string(nil), prefix...), string(f.Name()))
		*out = append(*out, path)
		if f.Message() != nil && !f.IsMap() && depth < 2 && f.Message().FullName() != "google.protobuf.Duration" {
			fieldsOf(f.Message(), path, depth+1, out)
		}
	}
}

// nest writes value at path inside a target.
func nest(path []string, value string) string {
	s := value
	for i := len(path) - 1; i >= 0; i-- {
		s = fmt.Sprintf("{%s: %s}", path[i], s)
	}
	return s
}

// TestSameAsProtoyaml writes every field of a target (and of the probes
// and their parts) with every value above, in a targets file and as a
// template, and asks for protoyaml's answers from both decoders.
func TestSameAsProtoyaml(t *testing.T) {
	var paths [][]string
	fieldsOf((&pb.Target{}).ProtoReflect().Descriptor(), nil, 0, &paths)
	for _, p := range paths {
		for _, v := range values {
			inner := nest(p, v)
			inner = inner[1 : len(inner)-1] // the target's own braces
			sameAsProtoyaml(t, "targets:\n  - name: a\n    "+inner+"\n")
			sameAsProtoyaml(t, inner+"\n")
		}
	}
	for _, doc := range documents {
		sameAsProtoyaml(t, doc)
	}
}

// documents are whole files: the README's and docs' kinds of targets
// file, and wrong ones.
var documents = []string{
	"",
	"# nothing\n",
	"targets:\n",
	"targets: []\n",
	"targets:\n  - name: web-1\n    group: edge\n    http: {url: \"http://127.0.0.1:8080/healthz\"}\n    interval: 1s\n    rise: 2\n",
	"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n  - name: b\n    rise: 0\n    tcp: {address: \"127.0.0.1:1\"}\n",
	"targets:\n  - name: a\n    tpc: {address: \"127.0.0.1:1\"}\n",
	"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    rise: many\n",
	"targets:\n  - name: a\n    tcp: {address: \"127.0.0.1:1\"}\n    interval: soon\n",
	"- name: a\n  tcp: {address: \"127.0.0.1:1\"}\n",
	"tragets: []\n",
	"targets: {name: a}\n",
	"targets:\n  - name: a\n    http: {url: \"http://x/\"}\n    tcp: {address: \"127.0.0.1:1\"}\n    grpc: {address: \"127.0.0.1:1\"}\n",
	"targets:\n  - name: a\n    flapThreshold: 3\n    flap_threshold: 4\n    6: 2s\n    99: 1\n    [google.api.http]: 1\n    [no.such]: 1\n    {a: b}: 1\n    [a, b]: 1\n",
	"targets:\n  - name: a\n    http:\n      url: http://127.0.0.1:1/\n      headers:\n        Host: example.com\n        X-Token: secret\n      expected_status: [200, 204]\n      expected_status_ranges: [\"200-299\"]\n      header_matches:\n        - name: Content-Type\n          regex: json\n      body_contains: ok\n",
	"targets:\n  - name: a\n    model: THREE_STATE\n    initial_state: HEALTHY\n    down_interval: 2m\n    fast_interval: 100ms\n    max_latency: 250ms\n",
	"targets:\n  - name: a\n    tcp:\n      address: 127.0.0.1:6379\n      steps:\n        - {send: \"PING\\r\\n\", expect_contains: PONG}\n",
	"targets:\n  - &t\n    name: a\n    tcp: {address: \"127.0.0.1:1\"}\n  - *t\n",
	"targets:\n  - name: a\n    interval: 1s\n    interval: 2s\n",
	"targets:\n  - name: a\n\ttcp: {}\n",
	"---\ntargets: []\n---\ntargets: []\n",
	"targets:\n  - name: a\n    rise: [1\n",
	"targets:\n  - name: \"a\n",
	"targets:\n  - name: a\n    rise: x\n    fall: y\n    interval: z\n    model: w\n",
}

// FuzzSameAsProtoyaml holds the decoder to protoyaml's answers for any
// input.
func FuzzSameAsProtoyaml(f *testing.F) {
	for _, doc := range documents {
		f.Add(doc)
	}
	for _, v := range values[:20] {
		f.Add("targets:\n  - name: a\n    rise: " + v + "\n    interval: " + v + "\n")
	}
	f.Fuzz(func(t *testing.T, data string) {
		sameAsProtoyaml(t, data)
	})
}

// An unknown field's error is an UnknownFieldError that names the key and
// every field of its message, though its text names the first few.
func TestUnknownFieldError(t *testing.T) {
	err := yamlpb.Unmarshal("f.yaml", []byte("targets:\n  - {name: a, intervall: 5s}\n"), &pb.TargetsFile{})
	var uf *yamlpb.UnknownFieldError
	if !errors.As(err, &uf) {
		t.Fatalf("error %v: no UnknownFieldError", err)
	}
	if uf.Field != "intervall" || !slices.Contains(uf.Fields, "interval") || !slices.Contains(uf.Fields, "remove_after_unhealthy") {
		t.Errorf("UnknownFieldError{Field: %q, Fields: %q}", uf.Field, uf.Fields)
	}
	if want := `unknown field "intervall", expected one of [name group http tcp grpc dns interval ...]`; uf.Error() != want {
		t.Errorf("text %q, want %q", uf.Error(), want)
	}
}
