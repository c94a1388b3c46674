package vm

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// QEMUImg is the qemu-img program used for disk layers.
const QEMUImg = "qemu-img"

// createLayer makes a qcow2 file whose reads fall through to the raw base
// image and whose writes stay in the layer.
func createLayer(ctx context.Context, base, layer string) error {
	out, err := exec.CommandContext(ctx, QEMUImg, "create", "-q", "-f", "qcow2",
		"-F", "raw", "-b", base, layer).CombinedOutput()
	if err != nil {
		return fmt.Errorf("vm: qemu-img create: %w: %s", err, out)
	}
	return nil
}

// copyFile copies src to a new file dst.
func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}
