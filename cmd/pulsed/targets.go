package main

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/yamlpb"
	"github.com/pulsehealth/pulse/server"
)

// A targets file declares targets in YAML, with the fields of
// pulse.v1.Target (as in AddTarget's JSON):
//
//	targets:
//	  - name: web-1
//	    group: edge
//	    http: {url: "http://127.0.0.1:8080/healthz"}
//	    interval: 1s
//	    rise: 2
//
// The file owns the targets it lists: loading it adds or updates each of
// them (marked source "file") and removes every file target it no longer
// lists. Targets added through the API are never removed by a reload; an
// API AddTarget of a name the file lists takes it over until the next
// reload, which puts the file's spec back.

// loadTargets parses and validates a targets file. Any error names the file
// and line, and nothing is returned with it: a bad file changes nothing.
//
// The YAML is decoded by yamlpb into pulse.v1.TargetsFile, whose errors
// name the file, line and column; the file is also read as a YAML tree to
// know each target's line for the checks that follow decoding (bounds,
// duplicate names).
func loadTargets(path string, d checker.Defaults) ([]checker.Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file declares no targets
	}
	lines, err := targetLines(doc.Content[0])
	if err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	var file pb.TargetsFile
	if err := yamlpb.Unmarshal(path, data, &file); err != nil {
		// Its message is "file:line:column what", then the line quoted
		// with a marker under the column, and for a mistyped field the
		// closest fields.
		return nil, errors.New(suggest.FileErrors(err))
	}
	if len(file.GetTargets()) != len(lines) {
		// Cannot happen for a file yamlpb decoded; refuse rather than
		// report a wrong line.
		return nil, fmt.Errorf("%s: %d targets decoded from %d entries", path, len(file.GetTargets()), len(lines))
	}
	seen := map[string]int{}
	specs := make([]checker.Spec, 0, len(lines))
	for i, t := range file.GetTargets() {
		spec, err := targetFromProto(t, d)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, lines[i], err)
		}
		if line, dup := seen[spec.Name]; dup {
			return nil, fmt.Errorf("%s:%d: target %q is already declared on line %d", path, lines[i], spec.Name, line)
		}
		seen[spec.Name] = lines[i]
		specs = append(specs, spec)
	}
	return specs, nil
}

// targetLines checks the file's outline (a mapping whose one key is
// targets, holding a list) and returns the line of each entry. Its errors
// start with the line number.
func targetLines(root *yaml.Node) ([]int, error) {
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%d: the file must be a mapping with one key, targets, holding the list of targets", root.Line)
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch key := root.Content[i]; key.Value {
		case "targets":
			list = root.Content[i+1]
		default:
			return nil, fmt.Errorf("%d: unknown key %q; the file holds one key, targets", key.Line, key.Value)
		}
	}
	if list == nil || list.Tag == "!!null" {
		return nil, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%d: targets must be a list of targets", list.Line)
	}
	lines := make([]int, len(list.Content))
	for i, item := range list.Content {
		lines[i] = item.Line
	}
	return lines, nil
}

// targetFromProto validates one decoded target as AddTarget does, with the
// daemon's defaults, and marks it as the file's.
func targetFromProto(t *pb.Target, d checker.Defaults) (checker.Spec, error) {
	spec, err := server.SpecFromProto(t)
	if err == nil {
		err = refuseRedacted(spec)
	}
	if err == nil {
		err = spec.WithDefaults(d).Validate()
	}
	err = server.ScrubTargetError(t, err) // the error is printed or logged
	var fe *checker.FieldError
	if errors.As(err, &fe) {
		return checker.Spec{}, fmt.Errorf("target %s: %w", server.Quote(t.GetName()), err)
	}
	if err != nil {
		return checker.Spec{}, err
	}
	spec.Source = checker.SourceFile
	return spec, nil
}

// refuseRedacted refuses the placeholder pulsed shows for a probe header's
// value: AddTarget takes it as "keep the stored value", but a targets file
// is the record of its targets and must hold the values themselves (a spec
// copied from ListTargets would otherwise send the placeholder).
func refuseRedacted(s checker.Spec) error {
	if g := s.Probe.GRPC; g != nil {
		for _, k := range slices.Sorted(maps.Keys(g.Metadata)) {
			if g.Metadata[k] == server.Redacted {
				return &checker.FieldError{Field: fmt.Sprintf("grpc.metadata[%q]", k), Reason: fmt.Sprintf("is %q, the placeholder pulsed shows for a value: a targets file must hold the value itself", server.Redacted)}
			}
		}
	}
	if s.Probe.HTTP == nil {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(s.Probe.HTTP.Headers)) {
		if s.Probe.HTTP.Headers[name] == server.Redacted {
			return &checker.FieldError{Field: fmt.Sprintf("http.headers[%q]", name), Reason: fmt.Sprintf("is %q, the placeholder pulsed shows for a value: a targets file must hold the value itself", server.Redacted)}
		}
	}
	return nil
}

// applyTargets makes the checker's file targets those of specs: it adds or
// updates each spec and removes file targets that specs no longer lists.
func applyTargets(c *checker.Checker, specs []checker.Spec, logger *slog.Logger) error {
	want := make(map[string]bool, len(specs))
	var added, updated, removed int
	var errs []error
	for _, s := range specs {
		want[s.Name] = true
	}
	current, _ := c.List("")
	before := make(map[string]checker.Spec, len(current))
	for _, st := range current {
		before[st.Spec.Name] = st.Spec
	}
	// In batches: one durable write each, not one per target.
	for lo := 0; lo < len(specs); lo += checker.MaxAddMany {
		batch := specs[lo:min(lo+checker.MaxAddMany, len(specs))]
		res, err := c.AddMany(batch)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i, r := range res {
			s := batch[i]
			old, existed := before[s.Name]
			switch {
			case r.Err != nil:
				errs = append(errs, fmt.Errorf("target %q: %w", s.Name, r.Err))
			case r.Created:
				added++
			case existed && !reflect.DeepEqual(old, r.Status.Spec):
				updated++
			}
		}
	}
	list, _ := c.List("")
	for _, st := range list {
		if st.Spec.Source == checker.SourceFile && !want[st.Spec.Name] {
			if _, err := c.Remove(st.Spec.Name); err != nil {
				errs = append(errs, fmt.Errorf("remove target %q: %w", st.Spec.Name, err))
				continue
			}
			removed++
		}
	}
	logger.Info("targets file applied", "targets", len(specs), "added", added, "updated", updated, "removed", removed)
	return errors.Join(errs...)
}
