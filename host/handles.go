package host

// HandleOutcome is what became of one planned deletion by nf_tables rule
// handle (HandleDeleter, NFTHandleDeleter).
type HandleOutcome uint8

const (
	// NotDeleted: nothing was done. The rule (or chain) was not found
	// exactly as planned, or something else kept it; a caller may delete
	// it by other means, which compare its content.
	NotDeleted HandleOutcome = iota
	// Deleted: nf_tables acked its deletion in a committed batch.
	Deleted
	// AlreadyGone: nf_tables said it did not exist (ENOENT); nothing was
	// deleted in its place.
	AlreadyGone
)
