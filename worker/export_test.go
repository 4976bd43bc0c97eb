package worker

// SetAfterKeyTaken makes every exclusive start run f between the round's
// take and the check of its key's lease (a slow start), until restore.
func SetAfterKeyTaken(f func()) (restore func()) {
	afterKeyTaken.Store(&f)
	return func() { afterKeyTaken.Store(nil) }
}
