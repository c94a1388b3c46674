// Package e2e holds the end-to-end tests of the rayito image: real QEMU
// VMs booted from the built image (rootfs/build-image.sh), talked to
// through the agent's forwarded port.
//
// The tests run when the image exists in RAYITO_BUILD_DIR (default: build/
// at the repository root) and skip otherwise, unless RAYITO_E2E=1, which
// turns missing artifacts into a failure so CI cannot pass by skipping.
// -short skips them too. They boot one VM at a time: timings are logged and
// the machine has two cores.
package e2e
