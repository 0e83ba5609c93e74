package web

import (
	"errors"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
)

// Badges: /badge/<target or group>/uptime/<window>.svg and
// /badge/<target or group>/response-time/<window>.svg, flat SVG badges of
// the shape Gatus serves (a grey label, "uptime 7d", beside a coloured
// value), for a README or a wiki. A name is looked up as a target first,
// then as a group. Behind the read token when tokens are set.

// badgeWindows are the windows a badge may cover, with the resolution
// each is read at.
var badgeWindows = map[string]struct{ window, res time.Duration }{
	"1h":  {time.Hour, time.Minute},
	"24h": {24 * time.Hour, time.Hour},
	"7d":  {7 * 24 * time.Hour, time.Hour},
	"30d": {30 * 24 * time.Hour, time.Hour},
}

// Badge colours, best first: the colours Gatus's badges use, so that a
// page mixing both reads alike.
var badgeColors = [...]string{"#40cc11", "#94cc11", "#ccd311", "#ccb311", "#cc8111", "#c7130a"}

// badgeGrey is the colour of a badge with nothing recorded.
const badgeGrey = "#9f9f9f"

// uptimeFloors are the least uptimes of badgeColors' first five colours;
// below the last, the last colour.
var uptimeFloors = [...]float64{0.975, 0.95, 0.9, 0.8, 0.65}

// responseCeilings are the most mean latency of badgeColors' first five
// colours; above the last, the last colour.
var responseCeilings = [...]time.Duration{50 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond}

// routeBadges routes the badges and /api/history (history.go).
func (h *Handler) routeBadges() {
	h.mux.HandleFunc("GET /api/history", h.serveHistory)
	h.mux.HandleFunc("GET /badge/{name}/uptime/{file}", h.serveUptimeBadge)
	h.mux.HandleFunc("GET /badge/{name}/response-time/{file}", h.serveResponseBadge)
}

// badgeSummary reads the history a badge request names; on failure it has
// answered the request itself.
func (h *Handler) badgeSummary(w http.ResponseWriter, r *http.Request) (history.Summary, string, bool) {
	if h.history == nil {
		http.Error(w, "this pulsed keeps no history", http.StatusNotFound)
		return history.Summary{}, "", false
	}
	file := r.PathValue("file")
	win, ok := strings.CutSuffix(file, ".svg")
	w2, known := badgeWindows[win]
	if !ok || !known {
		http.Error(w, fmt.Sprintf("badge: the file must be 1h.svg, 24h.svg, 7d.svg or 30d.svg, got %q", file), http.StatusBadRequest)
		return history.Summary{}, "", false
	}
	name := r.PathValue("name")
	if checker.ValidateName(name) != nil {
		http.Error(w, fmt.Sprintf("badge: %q is no target or group name", name), http.StatusBadRequest)
		return history.Summary{}, "", false
	}
	now := time.Now()
	sum, err := h.history.Query(name, now, w2.window, w2.res)
	if errors.Is(err, history.ErrUnknownTarget) {
		if _, serr := h.c.Status(name); serr == nil {
			sum, err = history.Empty(name, "", now, w2.window, w2.res), nil // not probed yet
		} else {
			sum, err = h.history.QueryGroup(name, now, w2.window, w2.res)
		}
	}
	switch {
	case errors.Is(err, history.ErrUnknownGroup):
		http.Error(w, fmt.Sprintf("badge: no target or group %q with history here", name), http.StatusNotFound)
		return history.Summary{}, "", false
	case err != nil:
		h.logger.Warn("badge: reading the history", "error", err)
		http.Error(w, "badge: cannot read the history: "+err.Error(), http.StatusInternalServerError)
		return history.Summary{}, "", false
	}
	return sum, win, true
}

func (h *Handler) serveUptimeBadge(w http.ResponseWriter, r *http.Request) {
	sum, win, ok := h.badgeSummary(w, r)
	if !ok {
		return
	}
	value, color := "no data", badgeGrey
	if sum.Availability >= 0 {
		value, color = uptimeText(sum.Availability), badgeColors[len(uptimeFloors)]
		for i, floor := range uptimeFloors {
			if sum.Availability >= floor {
				color = badgeColors[i]
				break
			}
		}
	}
	writeBadge(w, "uptime "+win, value, color)
}

func (h *Handler) serveResponseBadge(w http.ResponseWriter, r *http.Request) {
	sum, win, ok := h.badgeSummary(w, r)
	if !ok {
		return
	}
	value, color := "no data", badgeGrey
	if sum.Probes > 0 {
		value, color = latencyText(sum.Mean), badgeColors[len(responseCeilings)]
		for i, ceiling := range responseCeilings {
			if sum.Mean <= ceiling {
				color = badgeColors[i]
				break
			}
		}
	}
	writeBadge(w, "response time "+win, value, color)
}

// latencyText is a mean latency as a badge shows it: whole milliseconds,
// with a tenth below 10ms, so that a fast target's 0.8ms does not read
// "0ms".
func latencyText(d time.Duration) string {
	if d < 10*time.Millisecond {
		return strconv.FormatFloat(float64(d.Round(100*time.Microsecond))/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
	return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + "ms"
}

// uptimeText is an uptime as a badge shows it: "99.95%", "100%", never
// rounded up to 100% when a probe failed.
func uptimeText(v float64) string {
	s := strconv.FormatFloat(v*100, 'f', 2, 64)
	if s == "100.00" && v < 1 {
		s = "99.99"
	}
	return strings.TrimSuffix(strings.TrimRight(strings.TrimRight(s, "0"), "."), ".") + "%"
}

// textWidth estimates the width in pixels of s in 11px Verdana: 7 pixels
// a character, the figure shields.io-style badges are laid out with.
func textWidth(s string) int { return 7*len(s) + 10 }

// writeBadge writes a flat badge: label on grey, value on color.
func writeBadge(w http.ResponseWriter, label, value, color string) {
	lw, vw := textWidth(label), textWidth(value)
	width := lw + vw
	label, value = html.EscapeString(label), html.EscapeString(value)
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-cache, no-store, must-revalidate")
	w.Header().Set("Expires", "0")
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%[1]d" height="20" role="img" aria-label="%[4]s: %[5]s">
  <title>%[4]s: %[5]s</title>
  <linearGradient id="s" x2="0" y2="100%%">
    <stop offset="0" stop-color="#bbb" stop-opacity=".1"/>
    <stop offset="1" stop-opacity=".1"/>
  </linearGradient>
  <mask id="m"><rect width="%[1]d" height="20" rx="3" fill="#fff"/></mask>
  <g mask="url(#m)">
    <path fill="#555" d="M0 0h%[2]dv20H0z"/>
    <path fill="%[6]s" d="M%[2]d 0h%[3]dv20H%[2]dz"/>
    <path fill="url(#s)" d="M0 0h%[1]dv20H0z"/>
  </g>
  <g fill="#fff" text-anchor="middle" font-family="DejaVu Sans,Verdana,Geneva,sans-serif" font-size="11">
    <text x="%[7]d" y="15" fill="#010101" fill-opacity=".3">%[4]s</text>
    <text x="%[7]d" y="14">%[4]s</text>
    <text x="%[8]d" y="15" fill="#010101" fill-opacity=".3">%[5]s</text>
    <text x="%[8]d" y="14">%[5]s</text>
  </g>
</svg>
`, width, lw, vw, label, value, color, lw/2, lw+vw/2)
}
