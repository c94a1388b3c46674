// Package wire encodes and decodes the frames of the rayito.v1 websocket
// protocol: text control frames holding one JSON object, and binary data
// frames carrying stream bytes with their absolute offsets.
//
// Everything here is a pure function over byte slices so that it can be
// fuzzed and shared by the agent and the Go client.
package wire
