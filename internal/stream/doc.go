// Package stream holds everything long-lived that clients read: a registry
// of streams with global ids, the channel logs behind them, and attachments
// that deliver a log to one connection at that connection's own pace.
//
// The problem it solves: producers (processes, PTYs, watches, kernels) must
// never wait for a particular client, and clients must never lose data,
// even across disconnects and VM resumes. So producers only append to logs,
// every position in a log has a stable absolute cursor (byte offset or
// event seq), and each attachment pulls from its cursor within a window of
// unacknowledged data. Whatever a client needs that is no longer retained
// is announced as a gap instead of being skipped.
//
// Concurrency contract: every Log belongs to one Stream and is guarded by
// that stream's mutex. Any change to a stream (an append, an ack, an end, a
// cut) closes the stream's current notification channel, which wakes both
// blocked writers and waiting attachments; each re-checks its condition.
// An attachment's consumer may instead park with a hook (handoff.go),
// which a producer's append (or the stream's end) calls on the
// producer's goroutine, so that a little output reaches an idle client
// without waking anyone.
package stream
