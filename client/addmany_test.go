package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/client"
)

// AddMany sends a fleet larger than one call takes (pulsed refuses more
// than 10,000 targets a call whole) in several AddTargets calls, in order,
// and reports a bad target alone.
func TestAddManySendsSeveralCalls(t *testing.T) {
	e := newEnv(t, 1, checker.Config{})
	c := e.client(t)
	ctx := within(t)

	n := 10050
	ts := make([]client.Target, n)
	for i := range ts {
		ts[i] = tcpTarget(fmt.Sprintf("t%05d", i), "fleet", fmt.Sprintf("127.0.0.1:%d", 1+i%60000))
	}
	ts[10020].Rise = -1
	res, err := c.AddMany(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != n {
		t.Fatalf("%d results, want %d", len(res), n)
	}
	for i, r := range res {
		if r.Name != ts[i].Name {
			t.Fatalf("result %d is for %s, want %s", i, r.Name, ts[i].Name)
		}
		if i == 10020 {
			var ce *client.Error
			if !errors.As(r.Err, &ce) || ce.Code != codes.InvalidArgument || !strings.Contains(ce.Message, ".rise: must be at least 1") {
				t.Errorf("t10020: %v, want INVALID_ARGUMENT naming rise", r.Err)
			}
			continue
		}
		if r.Err != nil || !r.Created {
			t.Fatalf("%s: created %v, %v", r.Name, r.Created, r.Err)
		}
	}
	list, err := c.List(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Targets) != n-1 {
		t.Errorf("%d targets listed, want %d", len(list.Targets), n-1)
	}
}
