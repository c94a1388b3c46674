package client_test

import (
	"slices"
	"testing"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/stream"
	"github.com/rayito/rayito-agent/internal/wire"
)

// TestPinnedToTheAgent: the SDK's error codes, end reasons and stream
// kinds are the agent's, one for one: a code, reason or kind added or
// renamed on one side fails here until the other follows.
func TestPinnedToTheAgent(t *testing.T) {
	codes := []client.Code{client.CodeBadRequest, client.CodeNotFound, client.CodeConflict, client.CodeUnsupported,
		client.CodeLimit, client.CodeUnavailable, client.CodeInternal, client.CodePermissionDenied, client.CodeExpired, client.CodeUnauthenticated}
	pin(t, "error codes", codes, wire.Codes)
	reasons := []client.Reason{client.ReasonExit, client.ReasonDone, client.ReasonClosed, client.ReasonResume, client.ReasonError, client.ReasonOOMKilled}
	pin(t, "end reasons", reasons, stream.Reasons)
	kinds := []client.Kind{client.KindProcess, client.KindPTY, client.KindWatch, client.KindCell, client.KindChannels, client.KindFileRead, client.KindFileWrite}
	pin(t, "stream kinds", kinds, []stream.Kind{stream.KindProcess, stream.KindPTY, stream.KindWatch, stream.KindCell, stream.KindChannels, files.KindRead, files.KindWrite})
}

func pin[A, B ~string](t *testing.T, what string, sdk []A, agent []B) {
	t.Helper()
	var a, b []string
	for _, v := range sdk {
		a = append(a, string(v))
	}
	for _, v := range agent {
		b = append(b, string(v))
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Errorf("%s: the SDK has %q, the agent %q", what, a, b)
	}
}
