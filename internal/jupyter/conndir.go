package jupyter

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"
)

// connDirPrefix names the temporary directories that hold kernel
// connection files. The agent's pid follows it, so that a later run can
// tell the directories of an agent that is gone (it crashed or was
// killed before it could remove them) from those of one still running.
const connDirPrefix = "rayito-kernel-"

// newConnDir makes a kernel's connection directory.
func newConnDir() (string, error) {
	return os.MkdirTemp("", connDirPrefix+strconv.Itoa(os.Getpid())+"-")
}

// removeStaleConnDirs removes the connection directories of agents that
// are gone. A kernel reads its file only at start, so removing the file
// of one still running (orphaned by its agent) harms nothing.
func removeStaleConnDirs(log *zap.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), connDirPrefix+"*"))
	for _, d := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(d), connDirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || processExists(pid) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			log.Debug("removing a stale kernel connection dir", zap.String("dir", d), zap.Error(err))
		}
	}
}

func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
