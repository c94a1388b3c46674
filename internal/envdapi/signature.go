package envdapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strconv"
	"time"
)

// Operations a signed /files URL may grant.
const (
	opRead  = "read"
	opWrite = "write"
)

// signaturePrefix names the scheme of E2B's signed URLs.
const signaturePrefix = "v1_"

var (
	errSignatureExpired   = errors.New("the signed URL has expired")
	errSignatureMalformed = errors.New("signature_expiration is not a Unix time in seconds")
	errSignatureWrong     = errors.New("the signature does not match the path, operation, user and access token")
)

// checkSignature checks a signed /files URL the way the e2b SDK signs it:
// sig is "v1_" and the unpadded standard base64 of sha256 over
// "path:operation:user:token", with ":expiration" appended when the URL
// carries signature_expiration (Unix seconds, refused once past now).
func checkSignature(token, path, operation, user, sig, expiration string, now time.Time) error {
	msg := path + ":" + operation + ":" + user + ":" + token
	if expiration != "" {
		exp, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil {
			return errSignatureMalformed
		}
		if now.Unix() > exp {
			return errSignatureExpired
		}
		msg += ":" + expiration
	}
	sum := sha256.Sum256([]byte(msg))
	want := signaturePrefix + base64.RawStdEncoding.EncodeToString(sum[:])
	if subtle.ConstantTimeCompare([]byte(sig), []byte(want)) != 1 {
		return errSignatureWrong
	}
	return nil
}
