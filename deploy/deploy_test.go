// Package deploy_test checks the deployment files under deploy/: the
// systemd units pass systemd-analyze verify, the Kubernetes manifests
// decode strictly into the real API types, every flag they pass to pulsed
// is one pulsed knows, and the Prometheus alert rules pass promtool's
// checks and unit tests and use only metrics pulsed exports.
package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/pulsehealth/pulse/internal/pulsedproc"
)

var units = []string{"systemd/pulsed.service", "systemd/pulsed-replica.service"}

var manifests = []string{"kubernetes/secrets.yaml", "kubernetes/single.yaml", "kubernetes/replicas.yaml"}

// buildPulsed builds pulsed into a temporary directory.
func buildPulsed(t *testing.T) string {
	t.Helper()
	bin, err := pulsedproc.Build(t.Context(), t.TempDir(), "../cmd/pulsed")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// The units pass systemd-analyze verify with no warning at all (unknown
// keys are only warnings there), with ExecStart pointed at a real pulsed.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd): the units are not verified")
	}
	bin := buildPulsed(t)
	dir := t.TempDir()
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("ExecStart=/usr/local/bin/pulsed ")) {
			t.Fatalf("%s: no ExecStart=/usr/local/bin/pulsed", u)
		}
		data = bytes.ReplaceAll(data, []byte("/usr/local/bin/pulsed"), []byte(bin))
		path := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), analyze, "verify", path).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
	}
}

// decodeStrict decodes one YAML document into the API type its kind names,
// failing on any field the type does not have.
func decodeStrict(t *testing.T, file string, doc []byte) any {
	t.Helper()
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var obj any
	switch meta.APIVersion + " " + meta.Kind {
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 PersistentVolumeClaim":
		obj = &corev1.PersistentVolumeClaim{}
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1 NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	default:
		t.Fatalf("%s: no type for %s %s", file, meta.APIVersion, meta.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: %s: %v", file, meta.Kind, err)
	}
	return obj
}

// objects returns every object of the manifests, decoded strictly.
func objects(t *testing.T) map[string][]any {
	t.Helper()
	out := map[string][]any{}
	for _, m := range manifests {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(string(data), -1) {
			if strings.TrimSpace(regexp.MustCompile(`(?m)^#.*$`).ReplaceAllString(doc, "")) == "" {
				continue
			}
			out[m] = append(out[m], decodeStrict(t, m, []byte(doc)))
		}
	}
	return out
}

// The manifests decode strictly into the real Kubernetes types, and their
// pods are what the Deploy page promises: probes on /healthz and /readyz,
// resources requested, a non-root user, a termination grace above
// -shutdown-timeout plus 5s; the replicas have a PodDisruptionBudget.
func TestKubernetesManifests(t *testing.T) {
	var deployments, pdbs, policies int
	for file, objs := range objects(t) {
		for _, o := range objs {
			switch o := o.(type) {
			case *appsv1.Deployment:
				deployments++
				pod := o.Spec.Template.Spec
				if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 16 {
					t.Errorf("%s: %s: terminationGracePeriodSeconds %v, want above -shutdown-timeout 10s plus 5s", file, o.Name, g)
				}
				if sc := pod.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
					t.Errorf("%s: %s: does not run as user 65532", file, o.Name)
				}
				// A secret's files are root's, mode 0440 at most: without
				// the pod's fsGroup, user 65532 cannot read its TLS key
				// or tokens, and pulsed exits at start, again and again.
				for _, v := range pod.Volumes {
					if v.Secret == nil {
						continue
					}
					if sc := pod.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != 65532 {
						t.Errorf("%s: %s: mounts secret %s without fsGroup 65532: pulsed cannot read it", file, o.Name, v.Secret.SecretName)
						break
					}
					if m := v.Secret.DefaultMode; m != nil && *m&0o040 == 0 {
						t.Errorf("%s: %s: secret %s's mode %o is not readable by its group", file, o.Name, v.Secret.SecretName, *m)
					}
				}
				c := pod.Containers[0]
				if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
					t.Errorf("%s: %s: liveness probe is not GET /healthz", file, o.Name)
				}
				if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
					t.Errorf("%s: %s: readiness probe is not GET /readyz", file, o.Name)
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
					t.Errorf("%s: %s: no CPU or memory request", file, o.Name)
				}
			case *policyv1.PodDisruptionBudget:
				pdbs++
			case *networkingv1.NetworkPolicy:
				policies++
			}
		}
	}
	if deployments != 2 || pdbs != 1 || policies != 2 {
		t.Errorf("%d Deployments, %d PodDisruptionBudgets, %d NetworkPolicies; want 2, 1, 2", deployments, pdbs, policies)
	}
}

// A field the API does not have fails the strict decoding.
func TestStrictDecodingCatchesATypo(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 3\n")
	if err := yaml.UnmarshalStrict(doc, &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Errorf("a misspelt field decoded: %v", err)
	}
}

// flagName is a flag in a command line: -name or --name, alone or as -name=v.
var flagName = regexp.MustCompile(`^--?([a-z][a-z0-9-]*)(=.*)?$`)

// Every flag the units and the manifests pass to pulsed is one that
// `pulsed -help` lists.
func TestFlagsArePulsedFlags(t *testing.T) {
	bin := buildPulsed(t)
	var help bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "-help")
	cmd.Stdout, cmd.Stderr = &help, &help
	_ = cmd.Run() // -help exits non-zero with flag's ErrHelp on some paths
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`).FindAllStringSubmatch(help.String(), -1) {
		known[m[1]] = true
	}
	if !known["listen"] || !known["data-dir"] {
		t.Fatalf("pulsed -help lists no -listen or -data-dir:\n%s", help.String())
	}
	check := func(where string, args []string) {
		n := 0
		for _, a := range args {
			if m := flagName.FindStringSubmatch(a); m != nil {
				n++
				if !known[m[1]] {
					t.Errorf("%s passes -%s, which pulsed does not know", where, m[1])
				}
			}
		}
		if n == 0 {
			t.Errorf("%s passes no flag to pulsed", where)
		}
	}
	for _, u := range units {
		data, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/pulsed((?:.*\\\n)*.*)$`).FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s: no ExecStart=/usr/local/bin/pulsed", u)
		}
		check(u, strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " ")))
	}
	for file, objs := range objects(t) {
		for _, o := range objs {
			if d, ok := o.(*appsv1.Deployment); ok {
				check(file+": "+d.Name, d.Spec.Template.Spec.Containers[0].Args)
			}
		}
	}
}
