// Package boltstore keeps Pulse's registry in an embedded bbolt file: the
// checker.Store that pulsed uses by default.
//
// Layout: bucket "specs" maps a target name to its spec, bucket "states" a
// target name to its last state, bucket "policies" a group to its policy,
// and bucket "meta" holds the revision of the last state commit. Values are
// JSON with a version field. Every write is one bbolt transaction, fsynced
// before it returns.
package boltstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"pulse/checker"
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

// Store is a checker.Store on a bbolt file. It is safe for concurrent use.
type Store struct {
	db *bolt.DB
}

var _ checker.PolicyStore = (*Store)(nil)

// Open opens (creating if needed) the store in dir. It fails with an error
// wrapping ErrLocked when another process has it open, after waiting up to
// lockWait for it to close.
func Open(dir string, lockWait time.Duration) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s is locked (is another pulsed using data dir %s?)", ErrLocked, path, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
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
		return nil, fmt.Errorf("initialise %s: %w", path, err)
	}
	return &Store{db: db}, nil
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
	V                    int     `json:"v"`
	MaxUnhealthyFraction float64 `json:"max_unhealthy_fraction,omitempty"`
}

// LoadGroupPolicies returns every stored group policy.
func (s *Store) LoadGroupPolicies() (map[string]checker.GroupPolicy, error) {
	out := map[string]checker.GroupPolicy{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(policiesBucket)
		if b == nil { // a file from before policies: nothing stored
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var pr policyRecord
			if err := json.Unmarshal(v, &pr); err != nil {
				return fmt.Errorf("stored policy of group %q: %w", k, err)
			}
			out[string(k)] = checker.GroupPolicy{MaxUnhealthyFraction: pr.MaxUnhealthyFraction}
			return nil
		})
	})
	return out, err
}

// PutGroupPolicy stores a group's policy; the zero policy deletes it.
func (s *Store) PutGroupPolicy(group string, p checker.GroupPolicy) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(policiesBucket)
		if err != nil {
			return err
		}
		if p == (checker.GroupPolicy{}) {
			return b.Delete([]byte(group))
		}
		v, err := json.Marshal(policyRecord{V: 1, MaxUnhealthyFraction: p.MaxUnhealthyFraction})
		if err != nil {
			return err
		}
		return b.Put([]byte(group), v)
	})
}

type stateRecord struct {
	V              int           `json:"v"`
	State          checker.State `json:"state"`
	LastTransition time.Time     `json:"last_transition"`
}

// Load returns every stored target and the stored revision.
func (s *Store) Load() ([]checker.StoredTarget, uint64, error) {
	var out []checker.StoredTarget
	var rev uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(revisionKey); v != nil {
			var err error
			if rev, err = strconv.ParseUint(string(v), 10, 64); err != nil {
				return fmt.Errorf("stored revision %q: %w", v, err)
			}
		}
		states := tx.Bucket(statesBucket)
		return tx.Bucket(specsBucket).ForEach(func(k, v []byte) error {
			var sr specRecord
			if err := json.Unmarshal(v, &sr); err != nil {
				return fmt.Errorf("stored spec of %q: %w", k, err)
			}
			t := checker.StoredTarget{Spec: sr.Spec}
			if v := states.Get(k); v != nil {
				var st stateRecord
				if err := json.Unmarshal(v, &st); err != nil {
					return fmt.Errorf("stored state of %q: %w", k, err)
				}
				t.State, t.LastTransition = st.State, st.LastTransition
			}
			out = append(out, t)
			return nil
		})
	})
	return out, rev, err
}

// PutSpec stores a target's spec.
func (s *Store) PutSpec(spec checker.Spec) error {
	v, err := json.Marshal(specRecord{V: 1, Spec: spec})
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(specsBucket).Put([]byte(spec.Name), v)
	})
}

// DeleteTarget removes a target's spec and state.
func (s *Store) DeleteTarget(name string) error {
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
func (s *Store) CommitStates(states []checker.StoredState, deleted []string, rev uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		specs, b := tx.Bucket(specsBucket), tx.Bucket(statesBucket)
		for _, st := range states {
			if specs.Get([]byte(st.Name)) == nil {
				continue
			}
			v, err := json.Marshal(stateRecord{V: 1, State: st.State, LastTransition: st.LastTransition})
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

// Backup writes a consistent copy of the store file to w while the store
// stays in use (one read transaction), and returns the bytes written. The
// copy opens like the original: pulsed -data-dir on a directory holding it
// as pulse.db.
func (s *Store) Backup(w io.Writer) (int64, error) {
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}
