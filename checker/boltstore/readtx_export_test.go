package boltstore

// HoldReadTx begins a read transaction on s, as a reader that takes its
// time would hold one, and returns what ends it.
func HoldReadTx(s *Store) (release func(), err error) {
	tx, err := s.db.Begin(false)
	if err != nil {
		return nil, err
	}
	return func() { _ = tx.Rollback() }, nil
}
