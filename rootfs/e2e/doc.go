// Package e2e holds the end-to-end tests of the rayito image: real QEMU
// VMs booted from the built image (rootfs/build-image.sh) running the real
// agent, driven through its forwarded port by the Go client.
//
// The tests copy the image once and add an access token to the agent's
// environment file (/etc/rayito-agent.env, read by rayito-init and by
// rayito-agent.service alike), so the agent starts with
// RAYITO_ACCESS_TOKEN set; the built image is never written.
//
// A restored VM listens on another host port. Clients are pointed at a
// stable address instead (hostRoute, an http.Client whose dialer leads to
// the current VM), the way a host's front proxy would, so the client's own
// reconnect finds the restored VM and reattaches its streams.
//
// The tests run when the image exists in RAYITO_BUILD_DIR (default: build/
// at the repository root) and skip otherwise, unless RAYITO_E2E=1, which
// turns missing artifacts into a failure so CI cannot pass by skipping.
// -short skips them too. They boot one VM at a time: timings are logged
// (and written as a markdown table to $RAYITO_E2E_TIMINGS if set), and
// RAYITO_E2E_CONSOLE=1 logs every guest console, not only on failure.
//
// TestSoak (make soak) runs only with RAYITO_SOAK_CYCLES set: the resume
// test's VM and streams through that many snapshot/restore cycles, with
// the agent's footprint read in the guest every ten. It writes its report
// to RAYITO_SOAK_REPORT as well.
package e2e
