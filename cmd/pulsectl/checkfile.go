package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pulsehealth/pulse/checker/oneshot"
	"github.com/pulsehealth/pulse/checker/probe"
)

// fileTarget is one target of a check file, as a check file writes it plus
// non-HTTP kinds. See checkCommand's help for the meaning of each field.
type fileTarget struct {
	Name           string            `json:"name" yaml:"name"`
	Kind           string            `json:"kind" yaml:"kind"`
	URL            string            `json:"url" yaml:"url"`
	Address        string            `json:"address" yaml:"address"`
	Service        string            `json:"service" yaml:"service"`
	TLS            bool              `json:"tls" yaml:"tls"`
	Headers        map[string]string `json:"headers" yaml:"headers"`
	ExpectedStatus *int              `json:"expected_status" yaml:"expected_status"`
	TimeoutS       *float64          `json:"timeout_s" yaml:"timeout_s"`
	Timeout        string            `json:"timeout" yaml:"timeout"`
	Critical       *bool             `json:"critical" yaml:"critical"`
}

// fileTargets is the other accepted top level: {"targets": [...]}.
type fileTargets struct {
	Targets []fileTarget `json:"targets" yaml:"targets"`
}

// loadTargets reads a check file: JSON when its name ends in .json, YAML
// when it ends in .yaml or .yml, otherwise JSON when its first non-blank
// character is '[' or '{' and YAML if not. Unknown fields are errors, so a
// typo does not silently fall back to a default.
func loadTargets(path string) ([]oneshot.Target, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rows, err := decodeTargets(path, data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no targets", path)
	}
	targets := make([]oneshot.Target, 0, len(rows))
	seen := map[string]int{}
	for i, row := range rows {
		where := fmt.Sprintf("%s: target %d", path, i+1)
		if row.Name != "" {
			where += fmt.Sprintf(" (%s)", row.Name)
		}
		t, err := row.target()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if j, dup := seen[t.Name]; dup {
			return nil, fmt.Errorf("%s: name %q is already used by target %d", where, t.Name, j)
		}
		seen[t.Name] = i + 1
		targets = append(targets, t)
	}
	return targets, nil
}

func decodeTargets(path string, data []byte) ([]fileTarget, error) {
	trimmed := bytes.TrimSpace(data)
	isJSON := len(trimmed) > 0 && (trimmed[0] == '[' || trimmed[0] == '{')
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		isJSON = true
	case ".yaml", ".yml":
		isJSON = false
	}
	if isJSON {
		return decodeJSON(trimmed)
	}
	return decodeYAML(data)
}

// decodeJSON decodes the top level, then each target alone, so that an
// error names the target it is in.
func decodeJSON(data []byte) ([]fileTarget, error) {
	var raws []json.RawMessage
	if len(data) > 0 && data[0] == '{' {
		var doc struct {
			Targets []json.RawMessage `json:"targets"`
		}
		if err := strictJSON(data, &doc); err != nil {
			return nil, jsonWords(err, true)
		}
		raws = doc.Targets
	} else if err := strictJSON(data, &raws); err != nil {
		return nil, jsonWords(err, true)
	}
	rows := make([]fileTarget, len(raws))
	for i, raw := range raws {
		if err := strictJSON(raw, &rows[i]); err != nil {
			var named struct{ Name string }
			_ = json.Unmarshal(raw, &named) // only for the message
			return nil, fmt.Errorf("%s: %w", targetLabel(i, named.Name), jsonWords(err, false))
		}
	}
	return rows, nil
}

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			line := 1 + bytes.Count(data[:syn.Offset], []byte("\n"))
			return fmt.Errorf("line %d: %v", line, err)
		}
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the targets")
	}
	return nil
}

func decodeYAML(data []byte) ([]fileTarget, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(root.Content) == 0 {
		return nil, nil // empty document
	}
	// The targets' nodes, for errors that name the target they are in.
	top := root.Content[0]
	list := top
	if top.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(top.Content); i += 2 {
			if top.Content[i].Value == "targets" {
				list = top.Content[i+1]
			}
		}
	}
	var items []*yaml.Node
	if list.Kind == yaml.SequenceNode {
		items = list.Content
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if top.Kind == yaml.MappingNode {
		var doc fileTargets
		if err := dec.Decode(&doc); err != nil {
			return nil, yamlWords(err, items)
		}
		return doc.Targets, nil
	}
	var rows []fileTarget
	if err := dec.Decode(&rows); err != nil {
		return nil, yamlWords(err, items)
	}
	return rows, nil
}

// target checks one row and applies the defaults: kind http when url is
// set, expected_status 200, timeout 2s, critical true.
func (f fileTarget) target() (oneshot.Target, error) {
	t := oneshot.Target{Name: f.Name, Timeout: oneshot.DefaultTimeout, Critical: true}
	if strings.TrimSpace(f.Name) == "" {
		return t, errors.New("name is required")
	}
	if f.Critical != nil {
		t.Critical = *f.Critical
	}
	switch {
	case f.Timeout != "" && f.TimeoutS != nil:
		return t, errors.New("set timeout (a duration such as 1.5s) or timeout_s (seconds), not both")
	case f.Timeout != "":
		d, err := time.ParseDuration(f.Timeout)
		if err != nil || d <= 0 {
			return t, fmt.Errorf("timeout must be a positive duration such as 2s or 500ms, at most %v, got %q", oneshot.MaxTimeout, f.Timeout)
		}
		if d > oneshot.MaxTimeout {
			return t, fmt.Errorf("timeout must be at most %v, got %v", oneshot.MaxTimeout, d)
		}
		t.Timeout = d
	case f.TimeoutS != nil:
		s, most := *f.TimeoutS, oneshot.MaxTimeout.Seconds()
		if !(s > 0) || s > most {
			return t, fmt.Errorf("timeout_s must be a positive number of seconds, at most %v (%v), got %v", most, oneshot.MaxTimeout, s)
		}
		t.Timeout = time.Duration(s * float64(time.Second))
	}

	kind := strings.ToLower(f.Kind)
	if kind == "" && f.URL != "" {
		kind = "http"
	}
	only := func(field, forKind string, set bool) error {
		if set && kind != forKind {
			return fmt.Errorf("%s applies to kind %s only, and this target is kind %s", field, forKind, orDash(kind))
		}
		return nil
	}
	if err := errors.Join(
		only("url", "http", f.URL != ""),
		only("expected_status", "http", f.ExpectedStatus != nil),
		only("headers", "http", f.Headers != nil),
		only("service", "grpc", f.Service != ""),
		only("tls", "grpc", f.TLS),
	); err != nil {
		return t, err
	}
	switch kind {
	case "http":
		if f.Address != "" {
			return t, errors.New("an http target takes url, not address")
		}
		status := 200
		if f.ExpectedStatus != nil {
			status = *f.ExpectedStatus
		}
		t.Probe.HTTP = &probe.HTTPSpec{URL: f.URL, ExpectedStatus: []int{status}, Headers: f.Headers}
	case "tcp":
		t.Probe.TCP = &probe.TCPSpec{Address: f.Address}
	case "grpc":
		t.Probe.GRPC = &probe.GRPCSpec{Address: f.Address, Service: f.Service, TLS: f.TLS}
	case "":
		return t, errors.New("set url (an http target), or address with kind tcp or grpc")
	default:
		return t, fmt.Errorf("kind must be http, tcp or grpc, got %q", f.Kind)
	}
	if err := t.Validate(); err != nil {
		var fe *probe.FieldError
		if errors.As(err, &fe) {
			return t, fmt.Errorf("%s: %s", fileField(fe.Field), fe.Reason)
		}
		return t, err
	}
	return t, nil
}

// fileField names a probe.FieldError's field as the check file spells it.
func fileField(field string) string {
	switch field {
	case "http.url":
		return "url"
	case "http.expected_status":
		return "expected_status"
	case "http.headers":
		return "headers"
	case "tcp.address", "grpc.address":
		return "address"
	case "grpc.service":
		return "service"
	default:
		return field
	}
}
