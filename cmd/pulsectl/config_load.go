package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/pulsehealth/pulse/cmd/internal/suggest"
)

// loadConfig reads the config file at path. A missing file is no error
// unless named explicitly; an unknown key is, so that a typo is not
// ignored. Every error starts "config PATH" and names the line and the
// key as the file spells them.
func loadConfig(path string, named bool) (*configFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !named {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if !strings.HasPrefix(msg, "line ") {
			msg = ": " + msg
		}
		return nil, fmt.Errorf("config %s %s", path, strings.TrimPrefix(msg, " "))
	}
	var cfg configFile
	if doc.Kind == 0 { // empty, or comments alone
		return &cfg, nil
	}
	if err := checkConfig(doc.Content[0]); err != nil {
		return nil, fmt.Errorf("config %s %w", path, err)
	}
	if err := doc.Decode(&cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			return nil, fmt.Errorf("config %s %s", path, te.Errors[0]) // "line 4: mapping key ... already defined"
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &cfg, nil
}

// checkConfig checks the shape and the keys of a config file's YAML, so
// that no error speaks of Go types: a mapping of current-context and
// contexts, each context a mapping of configSettings' keys.
func checkConfig(root *yaml.Node) error {
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping of current-context and contexts", root.Line)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		switch key.Value {
		case "current-context":
			if val.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: current-context: want the name of a context", val.Line)
			}
		case "contexts":
			if err := checkContexts(val); err != nil {
				return err
			}
		default:
			return unknownKey(key, "the file's", yamlKeys(configFile{}))
		}
	}
	return nil
}

// checkContexts checks the contexts of a config file: a mapping of names
// to settings.
func checkContexts(node *yaml.Node) error {
	if node.Tag == "!!null" {
		return nil
	}
	if node.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: contexts: want the contexts by name, each a mapping of its settings", node.Line)
	}
	keys := yamlKeys(configSettings{})
	for i := 0; i+1 < len(node.Content); i += 2 {
		name, settings := node.Content[i], node.Content[i+1]
		if settings.Tag == "!!null" {
			continue
		}
		if settings.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: context %q: want a mapping of its settings (%s)", settings.Line, name.Value, strings.Join(keys, ", "))
		}
		for j := 0; j+1 < len(settings.Content); j += 2 {
			key, val := settings.Content[j], settings.Content[j+1]
			var b bool
			switch {
			case !slices.Contains(keys, key.Value):
				return unknownKey(key, "a context's", keys)
			case val.Kind != yaml.ScalarNode:
				return fmt.Errorf("line %d: %s: want a single value", val.Line, key.Value)
			case key.Value == "tls" && val.Decode(&b) != nil:
				return fmt.Errorf("line %d: tls: want true or false, got %q", val.Line, val.Value)
			}
		}
	}
	return nil
}

// unknownKey is the error for key, which is none of keys: the closest
// ones if any is close, else all of them.
func unknownKey(key *yaml.Node, whose string, keys []string) error {
	if hint := didYouMean(suggest.Closest(key.Value, keys, nil)); hint != "" {
		return fmt.Errorf("line %d: unknown key %q%s", key.Line, key.Value, hint)
	}
	return fmt.Errorf("line %d: unknown key %q; %s keys are: %s", key.Line, key.Value, whose, strings.Join(keys, ", "))
}

// yamlKeys lists the keys of v's struct type, by their yaml tags.
func yamlKeys(v any) []string {
	t := reflect.TypeOf(v)
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i], _, _ = strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
	}
	return keys
}
