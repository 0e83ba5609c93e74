package server_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// AddTargets registers each target as AddTarget would, refuses a bad one
// alone with the code and message AddTarget would answer, its field path
// under targets[i], and is idempotent.
func TestAddTargetsRefusesAloneNamingTheIndex(t *testing.T) {
	e := start(t, checker.Config{})
	bad := tcpTarget("web-2", "edge")
	bad.Rise = proto.Int32(-1)
	req := &pb.AddTargetsRequest{Targets: []*pb.Target{tcpTarget("web-1", "edge"), bad, tcpTarget("web-3", "edge")}}
	resp, err := e.client.AddTargets(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range resp.GetResults() {
		got = append(got, fmt.Sprintf("%s created=%v %s %s", r.GetName(), r.GetCreated(), r.GetCode(), r.GetError()))
	}
	want := []string{
		"web-1 created=true  ",
		"web-2 created=false INVALID_ARGUMENT targets[1].rise: must be at least 1, got -1",
		"web-3 created=true  ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("results:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if resp.GetCreated() != 2 || resp.GetRefused() != 1 {
		t.Errorf("created %d, refused %d; want 2 and 1", resp.GetCreated(), resp.GetRefused())
	}
	list, err := e.client.ListTargets(t.Context(), &pb.ListTargetsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetTargets()); n != 2 {
		t.Errorf("%d targets, want 2", n)
	}
	// Again: nothing new, nothing refused but the bad one.
	resp, err = e.client.AddTargets(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetCreated() != 0 || resp.GetRefused() != 1 {
		t.Errorf("again: created %d, refused %d; want 0 and 1", resp.GetCreated(), resp.GetRefused())
	}
}
