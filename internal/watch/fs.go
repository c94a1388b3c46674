package watch

import "os"

// isDir reports whether path is a directory, not following symlinks, so
// that a symlink inside a tree never pulls another tree into the watch.
func isDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}

// readSubdirs returns the names of dir's child directories.
func readSubdirs(dir string) (map[string]struct{}, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	return subdirsOf(entries), nil
}

func subdirsOf(entries []os.DirEntry) map[string]struct{} {
	subdirs := make(map[string]struct{})
	for _, e := range entries {
		if e.IsDir() {
			subdirs[e.Name()] = struct{}{}
		}
	}
	return subdirs
}
