package checker_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
)

func TestUpdateChangesOnlyWhatItIsToldAndKeepsState(t *testing.T) {
	e := newEnv(t, checker.Config{})
	s := spec("web-1")
	s.Group, s.Rise = "edge", 5
	e.add(t, s)
	e.probes.set("web-1", pass)
	e.c.RunRound(t.Context())
	w := watchNow(t, e.c, checker.Filter{})

	old, st, err := e.c.Update("web-1", func(cur checker.Spec) (checker.Spec, error) {
		cur.Fall = 7
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if old.Fall == 7 || old.Group != "edge" {
		t.Errorf("old spec %+v, want the spec before the update", old)
	}
	if st.Spec.Fall != 7 || st.Spec.Group != "edge" || st.Spec.Rise != 5 || st.PassStreak != 1 {
		t.Errorf("after Update: %+v; want fall 7, group and rise kept, pass streak 1 kept", st)
	}
	if got := kinds(next(t, w)); !cmp.Equal(got, []string{"updated web-1"}) {
		t.Errorf("events %v, want one update", got)
	}
}

func TestUpdateRejectsWithoutChanging(t *testing.T) {
	e := newEnv(t, checker.Config{})
	e.add(t, spec("web-1"))
	before, _ := e.c.Status("web-1")
	for _, tc := range []struct {
		name   string
		change func(checker.Spec) (checker.Spec, error)
		field  string
	}{
		{"invalid result", func(s checker.Spec) (checker.Spec, error) { s.Rise = 100000; return s, nil }, "rise"},
		{"renamed", func(s checker.Spec) (checker.Spec, error) { s.Name = "web-2"; return s, nil }, "name"},
	} {
		_, _, err := e.c.Update("web-1", tc.change)
		var fe *checker.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: %v, want a field error on %s", tc.name, err, tc.field)
		}
	}
	mine := errors.New("mine")
	if _, _, err := e.c.Update("web-1", func(s checker.Spec) (checker.Spec, error) { return s, mine }); err != mine {
		t.Errorf("change's error: %v, want it returned as is", err)
	}
	if after, _ := e.c.Status("web-1"); !cmp.Equal(before.Spec, after.Spec) {
		t.Errorf("a rejected update changed the spec: %+v", after.Spec)
	}
	if _, _, err := e.c.Update("nope", func(s checker.Spec) (checker.Spec, error) { return s, nil }); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := e.c.Status("nope"); !errors.Is(err, checker.ErrUnknownTarget) {
		t.Errorf("Update of an unknown name created it")
	}
}
