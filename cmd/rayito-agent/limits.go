package main

import (
	"syscall"
)

// raiseFDLimit raises the soft descriptor limit to the hard one: every
// connection, pipe and kernel socket costs a descriptor, and the agent
// sizes its connection limits from this one. The Go runtime already does
// so at start and gives the programs the agent runs the original soft
// limit back; calling Setrlimit would stop that, so it is called only if
// the limit is still low.
func raiseFDLimit() (soft, hard uint64, err error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, err
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return rl.Cur, rl.Max, err
		}
	}
	return rl.Cur, rl.Max, nil
}
