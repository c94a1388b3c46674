package files

import (
	"archive/tar"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteTar writes the directory at path to w as a tar archive (PAX
// format), read as the user: entries are named relative to the directory
// ("a.txt", "sub/", "sub/b.txt"), with modes, times, owners and symlinks
// (never followed). Sockets are left out. An entry the user cannot read,
// or a file that shrinks while it is archived, ends the archive with an
// error before its end-of-archive marker: the caller must make the
// transfer fail (the HTTP route aborts the response), since a tar reader
// may take an archive cut between entries for a complete one. Each file
// is held open on client's share (held.go) while it is written.
func (m *Manager) WriteTar(client, userName, path string, w io.Writer) error {
	u, p, err := m.resolve("read", userName, path)
	if err != nil {
		return err
	}
	err = m.as(u, func() error {
		st, err := os.Stat(p)
		if err != nil {
			return newErr("read", p, nil, err)
		}
		if !st.IsDir() {
			return newErr("read", p, ErrNotDir, nil)
		}
		return nil
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	if err := m.tarDir(client, u, tw, p, p); err != nil {
		return err
	}
	return tw.Close()
}

// tarItem is one entry of a directory, read as the user.
type tarItem struct {
	path string
	info fs.FileInfo
	link string // a symlink's target
}

// tarDir archives what dir holds, depth first with names sorted (as
// filepath.WalkDir goes). Only the file system calls run as the user, a
// directory's in one go and each file's open: the writes to w, which
// wait on the client, run as the agent, on no borrowed thread, so slow
// readers hold no OS threads however many they are.
func (m *Manager) tarDir(client string, u User, tw *tar.Writer, root, dir string) error {
	var items []tarItem
	err := m.as(u, func() error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return newErr("read", dir, nil, err)
		}
		for _, e := range entries {
			it := tarItem{path: filepath.Join(dir, e.Name())}
			if it.info, err = e.Info(); err != nil {
				return newErr("read", it.path, nil, err)
			}
			if it.info.Mode()&fs.ModeSymlink != 0 {
				if it.link, err = os.Readlink(it.path); err != nil {
					return newErr("read", it.path, nil, err)
				}
			}
			items = append(items, it)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := m.tarEntry(client, u, tw, root, it); err != nil {
			return err
		}
		if it.info.IsDir() {
			if err := m.tarDir(client, u, tw, root, it.path); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Manager) tarEntry(client string, u User, tw *tar.Writer, root string, it tarItem) error {
	fi, q := it.info, it.path
	if fi.Mode()&fs.ModeSocket != 0 {
		return nil
	}
	hdr, err := tar.FileInfoHeader(fi, it.link)
	if err != nil {
		return newErr("read", q, nil, err)
	}
	rel, _ := filepath.Rel(root, q)
	hdr.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Format = tar.FormatPAX
	if sys := statT(fi); sys != nil {
		hdr.Uname, hdr.Gname = m.users.OwnerName(sys.Uid), m.users.GroupName(sys.Gid)
	}
	var f *os.File
	if fi.Mode().IsRegular() {
		// Opened (as the user) before the header goes out, so an
		// unreadable file fails the archive before a header without
		// content; read as the agent, since the descriptor carries the
		// permission.
		if f, err = m.openHeld(client, u, q); err != nil {
			return err
		}
		defer m.closeHeld(client, f)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if f == nil {
		return nil
	}
	_, err = io.CopyN(tw, f, hdr.Size)
	if err == io.EOF {
		return newErr("read", q, ErrChanged, nil)
	}
	return err
}
