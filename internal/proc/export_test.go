package proc

import "testing"

// ReaperForTests is the package tests' shared reaper, for the tests of
// package proc_test: once it runs, every child of the test process must
// be started through it (proctest.Run).
func ReaperForTests(t testing.TB) *Reaper { return testReaper(t) }
