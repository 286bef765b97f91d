package cninet

// RollbackTimeout lets tests of a rollback that cannot finish (a lock
// held for good) wait less than the 30s a rollback has.
var RollbackTimeout = &rollbackTimeout
