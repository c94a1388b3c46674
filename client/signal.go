package client

// Signal is a signal name as the protocol spells it.
type Signal string

// The signals a client may send.
const (
	SIGTERM Signal = "SIGTERM"
	SIGKILL Signal = "SIGKILL"
	SIGINT  Signal = "SIGINT"
	SIGHUP  Signal = "SIGHUP"
	SIGQUIT Signal = "SIGQUIT"
	SIGUSR1 Signal = "SIGUSR1"
	SIGUSR2 Signal = "SIGUSR2"
	SIGSTOP Signal = "SIGSTOP"
	SIGCONT Signal = "SIGCONT"
)

// linuxSignals numbers signals as the agent's Linux does, whatever the
// client's own platform, for exit codes in the shell's 128+n convention.
var linuxSignals = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6,
	"SIGBUS": 7, "SIGFPE": 8, "SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12,
	"SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15, "SIGSTKFLT": 16, "SIGCHLD": 17,
	"SIGCONT": 18, "SIGSTOP": 19, "SIGTSTP": 20, "SIGTTIN": 21, "SIGTTOU": 22,
	"SIGURG": 23, "SIGXCPU": 24, "SIGXFSZ": 25, "SIGVTALRM": 26, "SIGPROF": 27,
	"SIGWINCH": 28, "SIGIO": 29, "SIGPWR": 30, "SIGSYS": 31,
}

func signalNumber(name string) int { return linuxSignals[name] }
