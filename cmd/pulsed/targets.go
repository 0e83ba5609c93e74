package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
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

// protoNoise matches protojson's "proto: " prefix (its space is sometimes
// a no-break space) and its positions in the JSON it parsed.
var protoNoise = regexp.MustCompile(`proto:[ \x{00a0}]|\(line \d+:\d+\): `)

// loadTargets parses and validates a targets file. Any error names the file
// and line, and nothing is returned with it: a bad file changes nothing.
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
	root := doc.Content[0]
	list := root
	if root.Kind == yaml.MappingNode {
		list = nil
		for i := 0; i+1 < len(root.Content); i += 2 {
			switch key := root.Content[i]; key.Value {
			case "targets":
				list = root.Content[i+1]
			default:
				return nil, fmt.Errorf("%s:%d: unknown key %q; the file holds one key, targets", path, key.Line, key.Value)
			}
		}
		if list == nil {
			return nil, nil
		}
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: targets must be a list of targets", path, list.Line)
	}
	seen := map[string]int{}
	specs := make([]checker.Spec, 0, len(list.Content))
	for _, item := range list.Content {
		spec, err := targetFromNode(item, d)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, item.Line, err)
		}
		if line, dup := seen[spec.Name]; dup {
			return nil, fmt.Errorf("%s:%d: target %q is already declared on line %d", path, item.Line, spec.Name, line)
		}
		seen[spec.Name] = item.Line
		specs = append(specs, spec)
	}
	return specs, nil
}

// targetFromNode converts one YAML target through the API's own JSON form,
// so the file accepts exactly what AddTarget accepts.
func targetFromNode(n *yaml.Node, d checker.Defaults) (checker.Spec, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return checker.Spec{}, err
	}
	js, err := json.Marshal(v)
	if err != nil {
		return checker.Spec{}, fmt.Errorf("target: %w", err)
	}
	var t pb.Target
	if err := protojson.Unmarshal(js, &t); err != nil {
		// protojson's positions are in the JSON it was given, not in the
		// file: keep only what it says.
		msg := protoNoise.ReplaceAllString(err.Error(), "")
		return checker.Spec{}, fmt.Errorf("target: %s", msg)
	}
	spec, err := server.SpecFromProto(&t)
	if err == nil {
		err = refuseRedacted(spec)
	}
	if err == nil {
		err = spec.WithDefaults(d).Validate()
	}
	var fe *checker.FieldError
	if errors.As(err, &fe) {
		return checker.Spec{}, fmt.Errorf("target %q: %w", t.GetName(), err)
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
		before, statusErr := c.Status(s.Name)
		after, created, err := c.Add(s)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("target %q: %w", s.Name, err))
		case created:
			added++
		case statusErr == nil && !reflect.DeepEqual(before.Spec, after.Spec):
			updated++
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
