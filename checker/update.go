package checker

import "fmt"

// Update changes the spec of the named target to what change makes of its
// current one, then applies it as Add applies a replacement: the result is
// completed with the defaults and validated, and the target keeps its state
// and streaks. It returns the spec before the change and the status after.
//
// change is called once, with the current spec, and must not call the
// Checker. An error it returns is returned as is and changes nothing; so
// does a result that fails validation (a *FieldError), or one that renames
// the target (a *FieldError on "name"). An unknown name returns an error
// wrapping ErrUnknownTarget.
//
// Update is atomic with respect to the other writes of this Checker (Add,
// Update, Remove): none lands between its read and its write. With a
// shared registry, a write of another replica may.
func (c *Checker) Update(name string, change func(Spec) (Spec, error)) (old Spec, st Status, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	cur, err := c.reg.status(name)
	if err != nil {
		return Spec{}, Status{}, err
	}
	spec, err := change(cur.Spec)
	if err != nil {
		return Spec{}, Status{}, err
	}
	if spec.Name != name {
		return Spec{}, Status{}, &FieldError{Field: "name", Reason: fmt.Sprintf("cannot change (from %q to %q): add a target of the new name and remove the old one", name, spec.Name)}
	}
	spec = spec.WithDefaults(c.defaults)
	if err := spec.Validate(); err != nil {
		return Spec{}, Status{}, err
	}
	// On replicas another may remove the target meanwhile; the write then
	// adds it back, as an Add after the removal would.
	res := c.reg.addMany([]Spec{spec})
	st, err = res[0].Status, res[0].Err
	if err != nil {
		return Spec{}, Status{}, err
	}
	return cur.Spec, st, nil
}
