// Package deploy holds Pulse's deployment files (systemd units, Kubernetes
// manifests, the container image's builder) and the tests that check them.
package deploy
