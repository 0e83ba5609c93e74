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
// non-HTTP kinds. See checkCommand's help for the meaning of each field;
// the probe options beyond the first fields are in checkfile_probes.go.
type fileTarget struct {
	Name           string            `json:"name" yaml:"name"`
	Kind           string            `json:"kind" yaml:"kind"`
	URL            string            `json:"url" yaml:"url"`
	Address        string            `json:"address" yaml:"address"`
	Service        string            `json:"service" yaml:"service"`
	TLS            bool              `json:"tls" yaml:"tls"`
	Headers        map[string]string `json:"headers" yaml:"headers"`
	ExpectedStatus statusCodes       `json:"expected_status" yaml:"expected_status"`
	TimeoutS       *float64          `json:"timeout_s" yaml:"timeout_s"`
	Timeout        string            `json:"timeout" yaml:"timeout"`
	Critical       *bool             `json:"critical" yaml:"critical"`

	// http
	Method               string            `json:"method" yaml:"method"`
	Body                 string            `json:"body" yaml:"body"`
	ExpectedStatusRanges []string          `json:"expected_status_ranges" yaml:"expected_status_ranges"`
	BodyContains         string            `json:"body_contains" yaml:"body_contains"`
	BodyNotContains      string            `json:"body_not_contains" yaml:"body_not_contains"`
	BodyRegex            string            `json:"body_regex" yaml:"body_regex"`
	BodyLimit            *int              `json:"body_limit" yaml:"body_limit"`
	HeaderMatches        []fileHeaderMatch `json:"header_matches" yaml:"header_matches"`
	FollowRedirects      *bool             `json:"follow_redirects" yaml:"follow_redirects"`
	// http (https:// URLs), tcp and grpc
	TLSOptions *fileTLS `json:"tls_options" yaml:"tls_options"`
	// tcp
	Steps []fileStep `json:"steps" yaml:"steps"`
	// grpc
	Authority        string            `json:"authority" yaml:"authority"`
	Metadata         map[string]string `json:"metadata" yaml:"metadata"`
	ExpectedStatuses []string          `json:"expected_statuses" yaml:"expected_statuses"`
	// dns
	DNS *fileDNS `json:"dns" yaml:"dns"`
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
	targets, _, err := loadCheckFile(path)
	return targets, err
}

// loadCheckFile is loadTargets that also returns the file's rows, in the
// same order, for what the command line may override.
func loadCheckFile(path string) ([]oneshot.Target, []fileTarget, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	rows, err := decodeTargets(path, data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, nil, fmt.Errorf("%s: no targets", path)
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
			return nil, nil, fmt.Errorf("%s: %w", where, err)
		}
		if j, dup := seen[t.Name]; dup {
			return nil, nil, fmt.Errorf("%s: name %q is already used by target %d", where, t.Name, j)
		}
		seen[t.Name] = i + 1
		targets = append(targets, t)
	}
	return targets, rows, nil
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
			words := jsonWords(err, false)
			if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				if nested := unknownNested(raw, strings.Trim(name, `"`)); nested != "" {
					words = errors.New(nested)
				}
			}
			return nil, fmt.Errorf("%s: %w", targetLabel(i, named.Name), words)
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
// set and dns when dns is, expected_status 200 (when no
// expected_status_ranges either), timeout 2s, critical true. A probe
// option on a kind it does not apply to is an error naming it.
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
	switch {
	case kind == "" && f.URL != "":
		kind = "http"
	case kind == "" && f.DNS != nil:
		kind = "dns"
	}
	switch kind {
	case "http", "tcp", "grpc", "dns":
	case "":
		return t, errors.New("set url (an http target), or address with kind tcp or grpc, or dns (a dns target)")
	default:
		return t, fmt.Errorf("kind must be http, tcp or grpc, got %q (or dns, with a dns object)", f.Kind)
	}
	if kind == "http" && f.Address != "" {
		return t, errors.New("an http target takes url, not address")
	}
	var misplaced []error
	for _, r := range f.kindOnly() {
		misplaced = append(misplaced, r.check(kind))
	}
	if err := errors.Join(misplaced...); err != nil {
		return t, err
	}
	var err error
	switch kind {
	case "http":
		t.Probe.HTTP, err = f.httpSpec()
	case "tcp":
		t.Probe.TCP, err = f.tcpSpec()
	case "grpc":
		t.Probe.GRPC, err = f.grpcSpec()
	case "dns":
		t.Probe.DNS, err = f.dnsSpec()
	}
	if err != nil {
		return t, err
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
