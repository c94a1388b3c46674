// Package ptymux runs programs in pseudo-terminals and turns each one into a
// stream: everything the program writes to its terminal goes into the
// stream's "pty" byte channel, and clients type into it, resize it and
// signal it through the stream's Control value (a *PTY).
//
// The hard part is the end. A terminal has no EOF: the master reads EIO once
// every holder of the slave side has closed it, which happens after the
// shell exits, unless a background job still holds it. So a PTY finishes
// its stream only after the shell was reaped AND the master was read dry,
// with the drain bounded for that background-job case. The master is made
// pollable so that the bound is a read deadline and closing the master
// interrupts a blocked read instead of waiting for it; a blocking master
// would leak its descriptor behind a read that never returns.
package ptymux
