package jupyter

import (
	"testing"

	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
)

// For the benchmarks in package jupyter_test, which measure the other
// surfaces over this package's kernels against a direct client.

// SharedManager returns the manager and registry the tests share.
func SharedManager() (*Manager, *stream.Registry) { return env.mgr, env.reg }

// SharedReaper is the test binary's reaper: every child goes through it.
func SharedReaper() *proc.Reaper { return env.reaper }

// DirectClient connects the baseline ZeroMQ client to the kernel's
// current process and returns a function that runs code to its end.
func DirectClient(b *testing.B, k *Kernel) func(code string) {
	inst, err := k.current()
	if err != nil {
		b.Fatal(err)
	}
	d := dialDirect(b, inst.info)
	return func(code string) { d.execute(b, code) }
}
