package proc

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// oomShield gives the agent's children an ordinary OOM score while the
// agent keeps its own shield.
//
// The image starts the agent with oom_score_adj -1000, so that the OOM
// killer takes a runaway command and not the agent; a child gets its
// parent's value at the fork. Setting each child's score to 0 after the
// fork (as the agent did until 2026-12-02) came too late: the child has
// already exec'd by then, and whatever it forked meanwhile (a shell's
// first command, a server's workers) kept -1000 for good, where nothing
// could kill it when memory ran out. So the agent drops its own value to
// 0 for the fork alone: the child is born with 0 and can never give
// itself less. Forks are serialized anyway (syscall.ForkLock), and for
// that millisecond the agent is merely scored like anything else: by its
// size, which is small next to a runaway's. The trade: were the OOM
// killer to pick the agent in that window, its init restarts it; a
// runaway left at -1000 could never be killed, and the VM would run out
// of memory for good.
//
// Raising the value back needs CAP_SYS_RESOURCE; an agent without it
// cannot do this and falls back to the child's score after the fork.
type oomShield struct {
	mu   sync.Mutex
	self *os.File // /proc/self/oom_score_adj, open for writing
	own  []byte   // the agent's value, written back after each fork
	// afterFork, if set (tests), runs right after a fork, as if the
	// agent were descheduled there.
	afterFork func()
}

// ownOOMScoreAdj is the agent's oom_score_adj (0 if unknown).
func ownOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// newOOMShield returns a shield if the agent runs with a negative
// oom_score_adj and may set it back after each fork, else nil.
func newOOMShield() *oomShield {
	if own := ownOOMScoreAdj(); own < 0 && hasCap(unix.CAP_SYS_RESOURCE) {
		return openOOMShield(own)
	}
	return nil
}

// openOOMShield returns a shield that gives the agent the value own back
// after each fork, or nil if the agent's value cannot be written.
func openOOMShield(own int) *oomShield {
	f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return nil
	}
	return &oomShield{self: f, own: []byte(strconv.Itoa(own))}
}

// fork runs fork with the agent's score at 0 and gives it back after.
func (s *oomShield) fork(fork func() (int, error)) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.self.WriteAt([]byte("0"), 0); err != nil {
		// The child inherits the shield: take it away from the child,
		// late, as the fallback does.
		pid, err := fork()
		if err == nil {
			unshieldChild(pid)
		}
		return pid, err
	}
	pid, err := fork()
	if s.afterFork != nil {
		s.afterFork()
	}
	// A failure leaves the agent at 0: unshielded, like its children,
	// and tried again at the next fork.
	s.self.WriteAt(s.own, 0)
	return pid, err
}

// unshieldChild sets a child's score to 0 after the fork: what an agent
// that cannot raise its own score back can do.
func unshieldChild(pid int) {
	os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0)
}

// hasCap reports whether the calling thread has capability c in its
// effective set.
func hasCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}
