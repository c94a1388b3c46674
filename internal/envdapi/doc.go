// Package envdapi serves the API of E2B's in-guest agent, envd, on the
// agent's listener, so that the e2b SDKs drive rayito-agent unchanged:
// the Connect RPC services process.Process and filesystem.Filesystem, and
// the /files route.
//
// It is an adapter: it translates envd's requests and events onto the
// managers the native protocol uses (proc, ptymux, watch, stream), and
// holds no process or file logic of its own. A command started here is a
// stream like any other, listed and attachable natively; a native command
// is reachable here by its pid.
//
// What envd's model lacks, the adapter maps explicitly: its Connect streams
// start at the moment of connecting, so each one is an attachment from the
// stream's current end; a resume ends every stream of this API with the
// Connect error unavailable, after the output written before the cut.
package envdapi
