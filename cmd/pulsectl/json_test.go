package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// int64Number matches a member of one of the API's 64-bit integer fields
// written as a JSON number, which protojson never does.
var int64Number = func() *regexp.Regexp {
	var names []string
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			for j := range m.Fields().Len() {
				switch f := m.Fields().Get(j); f.Kind() {
				case protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.Sint64Kind,
					protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
					names = append(names, regexp.QuoteMeta(f.JSONName()))
				}
			}
			walk(m.Messages())
		}
	}
	walk(pb.File_pulse_v1_pulse_proto.Messages())
	slices.Sort(names)
	return regexp.MustCompile(`"(?:` + strings.Join(slices.Compact(names), "|") + `)":\s*-?\d`)
}()

// Every -o json of a client command is protojson of the response message:
// it reads back strictly as that message, and its 64-bit integers are
// strings.
func TestJSONOutputsAreProtoJSON(t *testing.T) {
	p := startPulsed(t)
	web := okServer(t)
	addr := "--addr=" + p.Addr
	mustRun(t, "add", addr, "--name", "web-1", "--group", "edge", "--http", web.URL+"/healthz", "--rise", "1", "--passive")
	waitState(t, p.Addr, "web-1", pb.State_STATE_HEALTHY)
	for _, tc := range []struct {
		args []string
		msg  proto.Message
		has  string // a 64-bit member the output must hold, as a string
	}{
		{[]string{"ls"}, &pb.ListTargetsResponse{}, `"revision":\s*"\d+"`},
		{[]string{"state", "web-1"}, &pb.StateResponse{}, `"activeResults":\s*"\d+"`},
		{[]string{"healthy"}, &pb.HealthyResponse{}, ""},
		{[]string{"add", "--name", "web-2", "--http", web.URL + "/healthz"}, &pb.AddTargetResponse{}, `"activeResults":\s*"\d+"`},
		{[]string{"set", "web-2", "--interval", "5s"}, &pb.UpdateTargetResponse{}, ""},
		{[]string{"probe", "web-1"}, &pb.ProbeNowResponse{}, ""},
		{[]string{"policy", "get", "edge"}, &pb.GroupStatus{}, ""},
		{[]string{"outcome", "web-1", "--ok"}, &pb.ReportOutcomeResponse{}, `"passiveResults":\s*"\d+"`},
	} {
		out := mustRun(t, append(tc.args, addr, "-o", "json")...)
		if err := protojson.Unmarshal([]byte(out), tc.msg); err != nil {
			t.Errorf("%v -o json does not read back as %T: %v\n%s", tc.args, tc.msg, err, out)
		}
		if m := int64Number.FindString(out); m != "" {
			t.Errorf("%v -o json has a 64-bit integer as a number (%s):\n%s", tc.args, m, out)
		}
		if tc.has != "" && !regexp.MustCompile(tc.has).MatchString(out) {
			t.Errorf("%v -o json lacks %s:\n%s", tc.args, tc.has, out)
		}
		// The same text every time: encoding/json's indentation, not
		// protojson's, which adds a space here and there by build.
		var want bytes.Buffer
		if err := json.Indent(&want, []byte(out), "", "  "); err != nil || want.String() != out {
			t.Errorf("%v -o json is not indented as encoding/json indents it (%v):\n%s", tc.args, err, out)
		}
	}

	// watch -o json prints the snapshot with --snapshot only, as in text.
	for _, snapshot := range []bool{false, true} {
		args := []string{"watch", addr, "-o", "json"}
		if snapshot {
			args = append(args, "--snapshot")
		}
		w := startBackground(t, args...)
		eventually(t, "the snapshot's end", func() bool { return strings.Contains(w.stdout.String(), `"snapshotComplete"`) })
		w.stop(t)
		out := w.stdout.String()
		for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
			var ev pb.WatchTransitionsResponse
			if err := protojson.Unmarshal([]byte(line), &ev); err != nil {
				t.Errorf("watch -o json line %q: %v", line, err)
			}
			var want bytes.Buffer
			if err := json.Compact(&want, []byte(line)); err != nil || want.String() != line {
				t.Errorf("watch -o json line is not compact JSON (%v): %q", err, line)
			}
		}
		if m := int64Number.FindString(out); m != "" {
			t.Errorf("watch -o json has a 64-bit integer as a number (%s):\n%s", m, out)
		}
		if got := strings.Contains(out, `"snapshot":`); got != snapshot {
			t.Errorf("watch -o json, --snapshot %v: snapshot printed %v\n%s", snapshot, got, out)
		}
	}
}
