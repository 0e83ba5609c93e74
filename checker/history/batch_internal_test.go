package history

import (
	"slices"
	"testing"
)

// A batch's names are every target it writes to, once each and sorted,
// whether it writes the target's group, hours, events or several.
func TestBatchNames(t *testing.T) {
	b := &batch{
		groups: map[string]string{"m": "g", "c": "g"},
		hours:  map[string][]hourDelta{"c": {{}}, "z": {{}}, "a": {{}}},
		events: map[string][]Event{"m": {{}}, "b": {{}}, "z": {{}}},
	}
	if got, want := b.names(), []string{"a", "b", "c", "m", "z"}; !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
	if got := (&batch{}).names(); len(got) != 0 {
		t.Errorf("an empty batch's names: %v", got)
	}
}
