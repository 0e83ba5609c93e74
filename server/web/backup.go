package web

import (
	"io"
	"net/http"
	"strconv"
)

// Snapshot is a consistent copy of the store that GET /backup streams, as
// Config.Backup takes it: Read reads it from its start, Size is its length
// in bytes, Close discards it. Taking it must not keep the store from
// writers for longer than the copy itself takes (boltstore.Store.Snapshot
// copies the store to a temporary file); the client then reads at its own
// pace from the copy.
type Snapshot interface {
	io.ReadCloser
	Size() int64
}

// serveBackup answers GET /backup with a copy of the store, one backup at
// a time: a request while another backup runs gets 503 at once. The copy
// is taken first, whole (a failure to take it is a 500 that says why),
// then sent with its Content-Length; each write must be accepted within
// the write timeout, else the connection is cut, and a client sees a
// short body, never a complete-looking partial one.
func (h *Handler) serveBackup(w http.ResponseWriter, r *http.Request) {
	if h.backup == nil {
		http.Error(w, "pulsed runs without a store (-data-dir \"\"): there is nothing to back up", http.StatusNotFound)
		return
	}
	select {
	case h.backupSlot <- struct{}{}:
		defer func() { <-h.backupSlot }()
	default:
		w.Header().Set("Retry-After", "10")
		http.Error(w, "another backup is in progress (one at a time): try again when it has finished", http.StatusServiceUnavailable)
		return
	}
	snap, err := h.backup()
	if err != nil {
		h.logger.Error("backup failed: could not copy the store", "error", err)
		http.Error(w, "backup failed: could not copy the store: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer snap.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="pulse.db"`)
	w.Header().Set("Content-Length", strconv.FormatInt(snap.Size(), 10))
	w.Header().Set("Cache-Control", "no-store")
	n, err := io.Copy(w, snap) // each write within the handler's write timeout
	if err == nil && n != snap.Size() {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		h.logger.Warn("backup cut off", "error", err, "sent", n, "size", snap.Size(), "remote", r.RemoteAddr)
		panic(http.ErrAbortHandler) // close the connection: the body stays short
	}
}
