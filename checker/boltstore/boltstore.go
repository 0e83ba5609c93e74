// Package boltstore keeps Pulse's registry in an embedded bbolt file: the
// checker.Store that pulsed uses by default.
//
// Layout: bucket "specs" maps a target name to its spec, bucket "states" a
// target name to its last state record (state, flap log, hold), bucket "policies" a group to its policy,
// and bucket "meta" holds the revision of the last state commit. Values are
// JSON with a version field. Every write is one bbolt transaction, fsynced
// before it returns.
package boltstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
	"github.com/pulsehealth/pulse/internal/pageout"
)

// FileName is the store's file inside the data dir.
const FileName = "pulse.db"

var (
	specsBucket    = []byte("specs")
	statesBucket   = []byte("states")
	policiesBucket = []byte("policies")
	metaBucket     = []byte("meta")
	revisionKey    = []byte("revision")
)

// ErrLocked: another process holds the data dir's store open.
var ErrLocked = errors.New("the store is in use by another process")

// ErrDamaged: the store file is not a readable bbolt file (truncated,
// overwritten, corrupted pages, or another program's file). bbolt panics on
// some damage; every method recovers that into an error wrapping ErrDamaged.
var ErrDamaged = errors.New("damaged")

// damagedError says which file is damaged, why, and what to do.
type damagedError struct {
	path  string
	cause string
}

func (e *damagedError) Error() string {
	return fmt.Sprintf("%s is damaged (%s): restore a backup (docs/operations/durability.md, \"Backup\") or move it away", e.path, e.cause)
}

func (e *damagedError) Is(target error) bool { return target == ErrDamaged }

// recoverDamaged turns a bbolt panic into an error wrapping ErrDamaged in
// *err. Every method that reads or writes the file defers it as
//
//	defer recoverDamaged(path, &err, debug.SetPanicOnFault(true))
//
// so that a read past the mapped file (a page number out of range) is a
// panic to recover, not a fatal fault; it restores the goroutine's setting.
func recoverDamaged(path string, err *error, panicOnFault bool) {
	debug.SetPanicOnFault(panicOnFault)
	if v := recover(); v != nil {
		*err = &damagedError{path: path, cause: fmt.Sprint(v)}
	}
}

// Store is a checker.Store on a bbolt file. It is safe for concurrent use.
type Store struct {
	db *bolt.DB
}

var _ checker.Store = (*Store)(nil)

// Open opens (creating if needed) the store in dir. It fails with an error
// wrapping ErrLocked when another process has it open, after waiting up to
// lockWait for it to close.
//
// A file that is not a readable store gives an error wrapping ErrDamaged
// that says what to do, never a panic, an unbounded allocation or a loop:
// before bbolt reads the file, Open checks its meta page, its freelist and
// the tree of every bucket (each page within the store, of the right type,
// reached once, its elements within it). After damage that only bbolt
// finds, the file may stay locked until the process exits.
func Open(dir string, lockWait time.Duration) (_ *Store, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	// The file is checked before bbolt maps it (verify.go), for the damage
	// bbolt would crash or hang on. On other damage bbolt panics after it
	// has mapped the file, and leaves it mapped and so locked: the caller
	// is expected to give up on the store (pulsed exits), not to open it
	// again.
	defer recoverDamaged(path, &err, debug.SetPanicOnFault(true))
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait, OpenFile: openVerified(lockWait)})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s is locked (is another pulsed using data dir %s?)", ErrLocked, path, dir)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("open %s: %w", path, err)
	case errors.Is(err, syscall.EROFS): // not damage: the store may be whole
		return nil, fmt.Errorf("open %s: %w: pulsed writes its store; give it a data directory it can write", path, err)
	case err != nil: // the check's errors, bbolt's own: not a bbolt file, a bad checksum, too small
		return nil, &damagedError{path: path, cause: err.Error()}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{specsBucket, statesBucket, policiesBucket, metaBucket} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, &damagedError{path: path, cause: "initialise: " + err.Error()}
	}
	return &Store{db: db}, nil
}

// PageOut gives back the resident pages of the store's file that bbolt
// has mapped (see pageout.Mapping): the pages registration read stay
// resident though little reads them again. It returns the mapping's size.
// A read transaction keeps bbolt from mapping the file anew meanwhile.
func (s *Store) PageOut() (uint64, error) {
	var n uint64
	err := s.db.View(func(*bolt.Tx) error {
		res, err := pageout.Mapping(s.db.Info().Data)
		n = res.Bytes
		return err
	})
	return n, err
}

// Close closes the file. It is idempotent.
func (s *Store) Close() error { return s.db.Close() }

// Path returns the store file's path, e.g. for backups.
func (s *Store) Path() string { return s.db.Path() }

type specRecord struct {
	V    int          `json:"v"`
	Spec checker.Spec `json:"spec"`
}

type policyRecord struct {
	V                    int           `json:"v"`
	MaxUnhealthyFraction float64       `json:"max_unhealthy_fraction,omitempty"`
	SlowStart            time.Duration `json:"slow_start,omitempty"`
	RemoveAfterUnhealthy time.Duration `json:"remove_after_unhealthy,omitempty"`
	Objective            float64       `json:"objective,omitempty"`
	ObjectiveWindow      time.Duration `json:"objective_window,omitempty"`
	// Outlier is stored as the checker's type: its fields are plain.
	Outlier outlier.Policy `json:"outlier,omitzero"`
}

// LoadGroupPolicies returns every stored group policy.
func (s *Store) LoadGroupPolicies() (_ map[string]checker.GroupPolicy, err error) {
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	out := map[string]checker.GroupPolicy{}
	err = s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(policiesBucket)
		if b == nil { // a file from before policies: nothing stored
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var pr policyRecord
			if err := json.Unmarshal(v, &pr); err != nil {
				return fmt.Errorf("stored policy of group %q: %w", k, err)
			}
			out[string(k)] = checker.GroupPolicy{MaxUnhealthyFraction: pr.MaxUnhealthyFraction, SlowStart: pr.SlowStart, RemoveAfterUnhealthy: pr.RemoveAfterUnhealthy,
				Objective: pr.Objective, ObjectiveWindow: pr.ObjectiveWindow, Outlier: pr.Outlier}
			return nil
		})
	})
	return out, err
}

// PutGroupPolicy stores a group's policy; the zero policy deletes it.
func (s *Store) PutGroupPolicy(group string, p checker.GroupPolicy) (err error) {
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(policiesBucket)
		if err != nil {
			return err
		}
		if p == (checker.GroupPolicy{}) {
			return b.Delete([]byte(group))
		}
		v, err := json.Marshal(policyRecord{V: 1, MaxUnhealthyFraction: p.MaxUnhealthyFraction, SlowStart: p.SlowStart, RemoveAfterUnhealthy: p.RemoveAfterUnhealthy,
			Objective: p.Objective, ObjectiveWindow: p.ObjectiveWindow, Outlier: p.Outlier})
		if err != nil {
			return err
		}
		return b.Put([]byte(group), v)
	})
}

// stateRecord is a target's state record. Its flap log and hold came
// later, in the same version: a pulsed from before them reads the state
// and ignores them, and one that finds none starts them afresh.
type stateRecord struct {
	V              int           `json:"v"`
	State          checker.State `json:"state"`
	LastTransition time.Time     `json:"last_transition"`
	Flap           *flapRecord   `json:"flap,omitempty"`
	Held           bool          `json:"held,omitempty"`
}

// flapRecord is a flap log as stored: its changes as Unix nanoseconds,
// which a transition's commit encodes several times faster than text.
type flapRecord struct {
	Verdict  checker.State `json:"verdict"`
	Changes  []int64       `json:"changes,omitempty"`
	Flapping bool          `json:"flapping,omitempty"`
	Time     time.Time     `json:"time,omitzero"`
}

func encodeFlap(f *checker.FlapRecord) *flapRecord {
	if f == nil {
		return nil
	}
	fr := &flapRecord{Verdict: f.Verdict, Flapping: f.Flapping, Time: f.Time}
	if len(f.Changes) > 0 {
		fr.Changes = make([]int64, len(f.Changes))
		for i, t := range f.Changes {
			fr.Changes[i] = t.UnixNano()
		}
	}
	return fr
}

func (fr *flapRecord) decode() *checker.FlapRecord {
	if fr == nil {
		return nil
	}
	f := &checker.FlapRecord{Verdict: fr.Verdict, Flapping: fr.Flapping, Time: fr.Time}
	if len(fr.Changes) > 0 {
		f.Changes = make([]time.Time, len(fr.Changes))
		for i, ns := range fr.Changes {
			f.Changes[i] = time.Unix(0, ns)
		}
	}
	return f
}

// Load returns every stored target and the stored revision. A record that
// cannot be decoded is returned with its Err set (and only its name in the
// spec), so that the checker quarantines it instead of refusing to start.
func (s *Store) Load() (_ []checker.StoredTarget, _ uint64, err error) {
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	var out []checker.StoredTarget
	var rev uint64
	err = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(revisionKey); v != nil {
			var err error
			if rev, err = strconv.ParseUint(string(v), 10, 64); err != nil {
				return fmt.Errorf("stored revision %q: %w", v, err)
			}
		}
		states := tx.Bucket(statesBucket)
		return tx.Bucket(specsBucket).ForEach(func(k, v []byte) error {
			var sr specRecord
			if err := decodeSpec(v, &sr); err != nil {
				out = append(out, checker.StoredTarget{Spec: checker.Spec{Name: string(k)}, Err: err})
				return nil
			}
			t := checker.StoredTarget{Spec: sr.Spec}
			if v := states.Get(k); v != nil {
				var st stateRecord
				if err := json.Unmarshal(v, &st); err != nil {
					out = append(out, checker.StoredTarget{Spec: sr.Spec, Err: fmt.Errorf("stored state: %w", err)})
					return nil
				}
				t.State, t.LastTransition, t.Flap, t.Held = st.State, st.LastTransition, st.Flap.decode(), st.Held
			}
			out = append(out, t)
			return nil
		})
	})
	return out, rev, err
}

// PutSpec stores a target's spec.
func (s *Store) PutSpec(spec checker.Spec) (err error) {
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	v, err := json.Marshal(specRecord{V: specVersion(spec), Spec: spec})
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(specsBucket).Put([]byte(spec.Name), v)
	})
}

// PutSpecs stores specs in one transaction: all of them or none.
func (s *Store) PutSpecs(specs []checker.Spec) (err error) {
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	type record struct {
		name string
		v    []byte
	}
	rs := make([]record, len(specs))
	for i, spec := range specs {
		rs[i].name = spec.Name
		if rs[i].v, err = json.Marshal(specRecord{V: specVersion(spec), Spec: spec}); err != nil {
			return err
		}
	}
	rs = byName(rs, func(r record) string { return r.name })
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(specsBucket)
		for _, r := range rs {
			if err := b.Put([]byte(r.name), r.v); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteTarget removes a target's spec and state.
func (s *Store) DeleteTarget(name string) (err error) {
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(specsBucket).Delete([]byte(name)); err != nil {
			return err
		}
		return tx.Bucket(statesBucket).Delete([]byte(name))
	})
}

// CommitStates stores states, deletes those of the deleted targets and
// records rev, in one transaction. States of targets whose spec is gone
// (removed meanwhile) are not stored.
func (s *Store) CommitStates(states []checker.StoredState, deleted []string, rev uint64) (err error) {
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	states = byName(states, func(st checker.StoredState) string { return st.Name })
	return s.db.Update(func(tx *bolt.Tx) error {
		specs, b := tx.Bucket(specsBucket), tx.Bucket(statesBucket)
		for _, st := range states {
			if specs.Get([]byte(st.Name)) == nil {
				continue
			}
			v, err := json.Marshal(stateRecord{V: 1, State: st.State, LastTransition: st.LastTransition, Flap: encodeFlap(st.Flap), Held: st.Held})
			if err != nil {
				return err
			}
			if err := b.Put([]byte(st.Name), v); err != nil {
				return err
			}
		}
		for _, name := range deleted {
			if err := b.Delete([]byte(name)); err != nil {
				return err
			}
		}
		return tx.Bucket(metaBucket).Put(revisionKey, []byte(strconv.FormatUint(rev, 10)))
	})
}

// byName returns a copy of xs sorted by name, stably (of two records of
// one name the later stays later, and so is written last). bbolt puts a
// new key into its page by shifting the keys after it, so a transaction
// of many new keys in random order spends its time copying; in key order
// each goes at the end.
func byName[T any](xs []T, name func(T) string) []T {
	out := slices.Clone(xs)
	slices.SortStableFunc(out, func(a, b T) int { return strings.Compare(name(a), name(b)) })
	return out
}

// Backup writes a consistent copy of the store file to w while the store
// stays in use, and returns the bytes written. The copy opens like the
// original: pulsed -data-dir on a directory holding it as pulse.db. It
// takes a Snapshot first, so however slowly w accepts the bytes, writers
// wait for no more than the copy to a local file.
func (s *Store) Backup(w io.Writer) (int64, error) {
	snap, err := s.Snapshot()
	if err != nil {
		return 0, err
	}
	defer snap.Close()
	return io.Copy(w, snap)
}

// Snapshot copies the store, consistently, to a temporary file in the
// store's directory and returns it to read from its start. The copy holds
// a read transaction only while it writes the file, at the disk's pace: a
// bbolt read transaction held open keeps a write that must grow the file
// waiting (bbolt remaps it only once no reader has it mapped), so a slow
// consumer must read the Snapshot, never the store itself.
//
// The file needs as much free space as the store. Where the system allows,
// it is unlinked at once, so that nothing is left behind if pulsed dies;
// else Close removes it.
func (s *Store) Snapshot() (_ *Snapshot, err error) {
	var snap *Snapshot
	defer func() { // runs after recoverDamaged has set err
		if err != nil && snap != nil {
			snap.Close()
		}
	}()
	defer recoverDamaged(s.db.Path(), &err, debug.SetPanicOnFault(true))
	f, err := os.CreateTemp(filepath.Dir(s.db.Path()), FileName+".backup-*")
	if err != nil {
		return nil, fmt.Errorf("create the backup's copy: %w", err)
	}
	snap = &Snapshot{f: f}
	if os.Remove(f.Name()) == nil {
		snap.removed = true
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		var err error
		snap.size, err = tx.WriteTo(f)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("copy the store for a backup: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read the backup's copy: %w", err)
	}
	return snap, nil
}

// Snapshot is a consistent copy of the store, taken by Store.Snapshot. It
// reads from its start; it is not safe for concurrent use.
type Snapshot struct {
	f       *os.File
	size    int64
	removed bool // the file was unlinked when it was created
}

// Read reads the copy.
func (s *Snapshot) Read(p []byte) (int, error) { return s.f.Read(p) }

// Size returns the copy's length in bytes.
func (s *Snapshot) Size() int64 { return s.size }

// Close closes the copy and removes its file.
func (s *Snapshot) Close() error {
	err := s.f.Close()
	if !s.removed {
		err = errors.Join(err, os.Remove(s.f.Name()))
		s.removed = true
	}
	return err
}

// specVersion is the version of a spec's record: 2 when it has a
// Lifecycle (a mode, a slow start, an automatic removal), which a pulsed
// reading only version 1 would drop (and route a drained target): such a
// pulsed quarantines the record instead. Version 1 otherwise, so that a
// store written by this pulsed stays readable by an older one as long as
// nothing needs version 2.
func specVersion(spec checker.Spec) int {
	if spec.Lifecycle != nil {
		return 2
	}
	return 1
}

// decodeSpec decodes a stored spec record, of version 1 (before
// lifecycles) or 2. A record of another version is refused rather than
// read as less than it says. (A probe kind this version does not know
// decodes as no probe at all, which the checker's validation refuses.)
func decodeSpec(v []byte, sr *specRecord) error {
	if err := json.Unmarshal(v, sr); err != nil {
		return fmt.Errorf("stored spec: %w", err)
	}
	if sr.V != 1 && sr.V != 2 {
		return fmt.Errorf("stored spec: record version %d, this pulsed reads versions 1 and 2", sr.V)
	}
	return nil
}
