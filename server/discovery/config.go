// Package discovery reads the discovery configuration of pulsed: groups of
// targets found by Prometheus's own service discovery mechanisms
// (file_sd_configs, http_sd_configs, dns_sd_configs), chosen and named by
// Prometheus relabel_configs, and probed with a template that has every
// field of a target.
//
// The mechanisms and their YAML are Prometheus's: the configuration types
// are those of github.com/prometheus/prometheus/discovery, so a group's
// SD configs are spelled exactly as in a Prometheus scrape config. Only
// the mechanisms this package imports are known; any other (for example
// consul_sd_configs or kubernetes_sd_configs) is refused by name.
package discovery

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery"
	_ "github.com/prometheus/prometheus/discovery/dns"  // registers dns_sd_configs
	_ "github.com/prometheus/prometheus/discovery/file" // registers file_sd_configs
	"github.com/prometheus/prometheus/discovery/http"   // registers http_sd_configs
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	yamlv2 "go.yaml.in/yaml/v2"
	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/yamlpb"
)

// DefaultDrain is how long a target that left its source stays, drained,
// before it is removed, when its group does not set on_disappear.
const DefaultDrain = 30 * time.Second

// MaxDrain bounds on_disappear's drain duration.
const MaxDrain = time.Hour

// MaxGroups bounds the number of groups in one configuration.
const MaxGroups = 100

// groupName is the spelling a group's name must have: it starts target
// names, so it follows the rules of a target name's first part.
var groupName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// Config is a parsed and validated discovery configuration. It is a value:
// safe to read from any goroutine once LoadConfig returned it.
type Config struct {
	// Groups are the discovery groups, in the file's order, each with a
	// distinct name.
	Groups []*Group
}

// Group is one discovery group: its sources, the relabel rules that choose
// each discovered target's address and name, the probe template, and what
// happens to a target that leaves the sources.
type Group struct {
	// Name names the group; it is the first part of its targets' names.
	Name string
	// SDConfigs are the group's sources, as Prometheus parsed them.
	SDConfigs discovery.Configs
	// RelabelConfigs are applied to each discovered target's labels, as
	// Prometheus applies a scrape config's relabel_configs.
	RelabelConfigs []*relabel.Config
	// Template is the probe template: every field of a target except the
	// name, which discovery sets.
	Template *pb.Target
	// Drain is how long a target that left the sources stays drained
	// before it is removed; zero removes it at once.
	Drain time.Duration
}

// fileConfig is the file's outline, decoded with yaml v2 because
// Prometheus's configuration types implement yaml v2's Unmarshaler.
type fileConfig struct {
	Groups []*fileGroup `yaml:"groups"`
}

// fileGroup is one group as written in the file. SDConfigs is inlined by
// Prometheus's own decoder, so the mechanisms are keys of the group.
type fileGroup struct {
	Name           string            `yaml:"name"`
	RelabelConfigs []*relabel.Config `yaml:"relabel_configs,omitempty"`
	Template       map[string]any    `yaml:"template,omitempty"`
	OnDisappear    string            `yaml:"on_disappear,omitempty"`

	SDConfigs discovery.Configs `yaml:"-"`
}

// UnmarshalYAML decodes a group with Prometheus's inline SD configs.
func (g *fileGroup) UnmarshalYAML(unmarshal func(any) error) error {
	return discovery.UnmarshalYAMLWithInlineConfigs(g, unmarshal)
}

// LoadConfig reads and validates the discovery configuration in path. Any
// error names the file and the group and field at fault; nothing is
// returned with it, so a bad file changes nothing. Relative paths in
// file_sd_configs are taken from the file's directory, as Prometheus does.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := ParseConfig(data, dirOf(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}

// ParseConfig parses and validates a discovery configuration; dir is the
// directory relative file_sd_configs paths are taken from.
func ParseConfig(data []byte, dir string) (*Config, error) {
	var fc fileConfig
	if err := yamlv2.UnmarshalStrict(data, &fc); err != nil {
		return nil, errors.New(scrub(err.Error()))
	}
	if len(fc.Groups) > MaxGroups {
		return nil, fmt.Errorf("groups: %d groups, more than the maximum of %d", len(fc.Groups), MaxGroups)
	}
	cfg := &Config{}
	seen := map[string]int{}
	for i, fg := range fc.Groups {
		if fg == nil {
			return nil, fmt.Errorf("groups[%d]: empty group", i)
		}
		g, err := fg.validate(dir)
		if err != nil {
			return nil, fmt.Errorf("groups[%d] (%s): %w", i, quoteName(fg.Name), err)
		}
		if j, dup := seen[g.Name]; dup {
			return nil, fmt.Errorf("groups[%d]: name %q is already the name of groups[%d]", i, g.Name, j)
		}
		seen[g.Name] = i
		cfg.Groups = append(cfg.Groups, g)
	}
	return cfg, nil
}

func quoteName(s string) string {
	if s == "" {
		return "unnamed"
	}
	return fmt.Sprintf("%q", s)
}

func (fg *fileGroup) validate(dir string) (*Group, error) {
	if !groupName.MatchString(fg.Name) {
		return nil, fmt.Errorf("name: must be 1 to 40 lowercase letters, digits or '-', starting and ending with a letter or digit, got %q", fg.Name)
	}
	if len(fg.SDConfigs) == 0 {
		return nil, errors.New("no source: give at least one of file_sd_configs, http_sd_configs, dns_sd_configs")
	}
	fg.SDConfigs.SetDirectory(dir)
	for i, rc := range fg.RelabelConfigs {
		if rc == nil {
			return nil, fmt.Errorf("relabel_configs[%d]: empty rule", i)
		}
		if err := rc.Validate(model.UTF8Validation); err != nil {
			return nil, fmt.Errorf("relabel_configs[%d]: %w", i, err)
		}
	}
	tmpl, err := decodeTemplate(fg.Template)
	if err != nil {
		return nil, err
	}
	drain, err := parseOnDisappear(fg.OnDisappear)
	if err != nil {
		return nil, err
	}
	g := &Group{Name: fg.Name, SDConfigs: fg.SDConfigs, RelabelConfigs: fg.RelabelConfigs, Template: tmpl, Drain: drain}
	// Check the template's other fields now, on a sample target, rather
	// than on every discovered one.
	sample := labels.NewBuilder(labels.FromStrings(model.AddressLabel, "127.0.0.1:1", model.SchemeLabel, "http"))
	if _, err := g.spec(sample, checker.StandardDefaults()); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	return g, nil
}

// decodeTemplate decodes the template with the targets file's schema
// (pulse.v1.Target), so its fields are spelled as in a targets file.
func decodeTemplate(m map[string]any) (*pb.Target, error) {
	if m == nil {
		return nil, errors.New("template: missing; give the probe (http, tcp, grpc or dns) and any other field of a target")
	}
	if _, ok := m["name"]; ok {
		return nil, errors.New("template.name: discovery names its targets (from the group and the address, or the relabeled __pulse_name__); remove the field")
	}
	data, err := yamlv3.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	var t pb.Target
	if err := yamlpb.Unmarshal("template", data, &t); err != nil {
		return nil, errors.New(strings.TrimRight(scrub(err.Error()), "\n"))
	}
	switch {
	case t.GetTcp() != nil:
		if t.GetTcp().GetAddress() != "" {
			return nil, errors.New("template.tcp.address: discovery sets the address; remove the field")
		}
	case t.GetGrpc() != nil:
		if t.GetGrpc().GetAddress() != "" {
			return nil, errors.New("template.grpc.address: discovery sets the address; remove the field")
		}
	case t.GetHttp() != nil:
		if u := t.GetHttp().GetUrl(); u != "" && !strings.HasPrefix(u, "/") {
			return nil, fmt.Errorf("template.http.url: is the path (and query) after the discovered address and must start with '/', got %q", u)
		}
	case t.GetDns() != nil:
		return nil, errors.New("template.dns: a DNS probe asks about a name, not a discovered address; use http, tcp or grpc")
	default:
		return nil, errors.New("template: has no probe; give one of http, tcp, grpc")
	}
	return &t, nil
}

// parseOnDisappear reads "remove" or "drain DURATION"; empty is a drain of
// DefaultDrain.
func parseOnDisappear(s string) (time.Duration, error) {
	fields := strings.Fields(s)
	switch {
	case len(fields) == 0:
		return DefaultDrain, nil
	case len(fields) == 1 && fields[0] == "remove":
		return 0, nil
	case len(fields) == 2 && fields[0] == "drain":
		d, err := time.ParseDuration(fields[1])
		if err != nil || d < checker.MinDrainFor || d > MaxDrain {
			return 0, fmt.Errorf("on_disappear: drain takes a duration of at least %s and at most %s, got %q", checker.MinDrainFor, MaxDrain, fields[1])
		}
		return d, nil
	}
	return 0, fmt.Errorf("on_disappear: must be %q or %q, got %q", "remove", "drain DURATION", s)
}

// secretLine matches the values of the keys that hold secrets in
// Prometheus's HTTP client config, as an error message may quote them.
var secretLine = regexp.MustCompile(`(?i)((?:password|credentials|bearer_token|client_secret|secret)\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,}]+)`)

// scrub removes secret values from a decoding error's message: yaml and
// yamlpb errors can quote the line at fault.
func scrub(msg string) string {
	return secretLine.ReplaceAllString(msg, "${1}<secret>")
}

// CheckEgress checks the http_sd URLs of c against the egress policy p (a
// URL whose host is an IP address p denies is an error naming the group
// and field), as AddTarget checks a target's address. A host name passes:
// what it resolves to is checked at every connection, redirects included
// (see Options.Egress).
func (c *Config) CheckEgress(p *probe.EgressPolicy) error {
	if p == nil {
		p = probe.DefaultEgressPolicy()
	}
	for i, g := range c.Groups {
		n := 0
		for _, sd := range g.SDConfigs {
			hc, ok := sd.(*http.SDConfig)
			if !ok {
				continue
			}
			field := fmt.Sprintf("groups[%d] (%q): http_sd_configs[%d].url", i, g.Name, n)
			n++
			u, err := url.Parse(hc.URL)
			if err != nil {
				return fmt.Errorf("%s: %w", field, err)
			}
			host := u.Hostname()
			addr, err := netip.ParseAddr(host)
			if err != nil {
				continue // a name: checked where it connects
			}
			if err := p.Check(addr); err != nil {
				return fmt.Errorf("%s: %s: %w", field, safeURL(hc.URL), err)
			}
		}
	}
	return nil
}
