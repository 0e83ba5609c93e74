package web

import (
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"github.com/pulsehealth/pulse/server"
)

// publicPatterns are the routes anyone may read, token or not: liveness
// and readiness (Kubernetes probes and load balancers send no token), and
// the status page's static shell (see staticPaths), which holds no data.
var publicPatterns = map[string]bool{
	"GET /healthz": true,
	"GET /readyz":  true,
}

// writePatterns are the routes that need the write role: the backup is
// the raw store, probe header values included.
var writePatterns = map[string]bool{
	"GET /backup": true,
}

// staticPaths lists the URL paths of the embedded files ("/" for
// index.html): the page's shell, which anyone may load.
func staticPaths(sub fs.FS) map[string]bool {
	paths := map[string]bool{"/": true}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths["/"+p] = true
		}
		return nil
	})
	return paths
}

// authorize checks r's "Authorization: Bearer <token>" against the role its
// route needs, and answers 401 (no or unknown token) or 403 (too low a
// role) itself when it fails. With no tokens every request passes.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) bool {
	if h.tokens == nil {
		return true
	}
	// The route the mux will take decides, so no spelling of a path
	// reaches a handler under another path's rule.
	_, pattern := h.mux.Handler(r)
	if publicPatterns[pattern] || pattern == "GET /" && h.static[r.URL.Path] {
		return true
	}
	need := server.RoleRead
	if writePatterns[pattern] {
		need = server.RoleWrite
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if token = strings.TrimSpace(token); !strings.EqualFold(scheme, "Bearer") || token == "" {
		refuse(w, http.StatusUnauthorized, `Bearer realm="pulse"`,
			`missing token: send the header "Authorization: Bearer <token>" (a token of pulsed's -token-file)`)
		return false
	}
	role, name, ok := h.tokens.Authenticate(token)
	if !ok {
		h.logger.Debug("http request with an invalid token", "path", r.URL.Path, "remote", r.RemoteAddr)
		refuse(w, http.StatusUnauthorized, `Bearer realm="pulse", error="invalid_token"`, "invalid token")
		return false
	}
	if role < need {
		refuse(w, http.StatusForbidden, `Bearer realm="pulse", error="insufficient_scope"`,
			fmt.Sprintf("token %q has the %v role; %s needs %v", name, role, r.URL.Path, need))
		return false
	}
	return true
}

func refuse(w http.ResponseWriter, code int, challenge, msg string) {
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, code)
}

// setSecurityHeaders keeps the page from being framed or fed other
// scripts (its token lives in the tab's sessionStorage) and from leaking
// its URL.
func setSecurityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
}
