package checker_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
)

// A group's availability objective: in (0, 1), over whole hours up to 30
// days (the default); a refused one changes nothing.
func TestGroupObjectiveBounds(t *testing.T) {
	e := newEnv(t, checker.Config{})
	g, err := e.c.SetGroupPolicy("edge", checker.GroupPolicy{Objective: 0.999})
	if err != nil || g.Policy.ObjectiveWindow != checker.MaxObjectiveWindow {
		t.Fatalf("objective without a window: %+v, %v; want the window %v", g.Policy, err, checker.MaxObjectiveWindow)
	}
	for _, c := range []struct {
		p     checker.GroupPolicy
		field string
	}{
		{checker.GroupPolicy{Objective: 1}, "availability_objective"},
		{checker.GroupPolicy{Objective: -0.5}, "availability_objective"},
		{checker.GroupPolicy{Objective: math.NaN()}, "availability_objective"},
		{checker.GroupPolicy{ObjectiveWindow: time.Hour}, "objective_window"},
		{checker.GroupPolicy{Objective: 0.9, ObjectiveWindow: 90 * time.Minute}, "objective_window"},
		{checker.GroupPolicy{Objective: 0.9, ObjectiveWindow: 31 * 24 * time.Hour}, "objective_window"},
	} {
		_, err := e.c.SetGroupPolicy("edge", c.p)
		var fe *checker.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want a FieldError on %s", c.p, err, c.field)
		}
	}
	if g := e.c.Groups("edge"); len(g) != 1 || g[0].Policy.Objective != 0.999 {
		t.Errorf("after refused policies: %+v, want the first kept", g)
	}
}
