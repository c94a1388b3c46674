package envdapi

import (
	"errors"
	"net/url"
	"testing"
	"time"
)

// URLs signed by the e2b SDK 2.51.0 (downloadUrl and uploadUrl) for a
// sandbox whose access token is "tok-123".
const sdkToken = "tok-123"

var sdkSigned = []struct {
	url, op string
}{
	{"http://127.0.0.1:1/files?path=%2Fhome%2Fuser%2Fa+b.txt&signature=v1_iWKP4h%2B2B8CKBZjd5tQn%2FgrLjOytF6xbAMqPrFOfecI", opRead},
	{"http://127.0.0.1:1/files?username=root&path=%2Ftmp%2Fx&signature=v1_1I1LX4nowcsrHoNbRC9D0frj8kEQByn01w604PoS7%2FE&signature_expiration=1796101326", opRead},
	{"http://127.0.0.1:1/files?path=%2Ftmp%2Fy&signature=v1_8IxOobRsqCbzLtYbQsR4eGXU0UN1nqsZyMie2EnAYXM", opWrite},
}

func checkURL(t *testing.T, raw, token, op string, now time.Time) error {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	return checkSignature(token, q.Get("path"), op, q.Get("username"), q.Get("signature"), q.Get("signature_expiration"), now)
}

func TestSignatureFromSDK(t *testing.T) {
	t.Parallel()
	before := time.Unix(1796101326, 0)
	for _, c := range sdkSigned {
		if err := checkURL(t, c.url, sdkToken, c.op, before); err != nil {
			t.Errorf("%s: %v", c.url, err)
		}
	}
}

func TestSignatureRefused(t *testing.T) {
	t.Parallel()
	now := time.Unix(1796101326, 0)
	for _, c := range []struct {
		name, url, token, op string
		at                   time.Time
		want                 error
	}{
		{"other token", sdkSigned[0].url, "tok-124", opRead, now, errSignatureWrong},
		{"write with a read signature", sdkSigned[0].url, sdkToken, opWrite, now, errSignatureWrong},
		{"read with a write signature", sdkSigned[2].url, sdkToken, opRead, now, errSignatureWrong},
		{"other path", "http://h/files?path=%2Fetc%2Fshadow&signature=v1_iWKP4h%2B2B8CKBZjd5tQn%2FgrLjOytF6xbAMqPrFOfecI", sdkToken, opRead, now, errSignatureWrong},
		{"other user", "http://h/files?username=user&path=%2Ftmp%2Fx&signature=v1_1I1LX4nowcsrHoNbRC9D0frj8kEQByn01w604PoS7%2FE&signature_expiration=1796101326", sdkToken, opRead, now, errSignatureWrong},
		{"expiration moved", "http://h/files?username=root&path=%2Ftmp%2Fx&signature=v1_1I1LX4nowcsrHoNbRC9D0frj8kEQByn01w604PoS7%2FE&signature_expiration=1796101327", sdkToken, opRead, now, errSignatureWrong},
		{"expiration dropped", "http://h/files?username=root&path=%2Ftmp%2Fx&signature=v1_1I1LX4nowcsrHoNbRC9D0frj8kEQByn01w604PoS7%2FE", sdkToken, opRead, now, errSignatureWrong},
		{"expired", sdkSigned[1].url, sdkToken, opRead, now.Add(time.Second), errSignatureExpired},
		{"expiration not a number", "http://h/files?path=%2Ftmp%2Fx&signature=v1_x&signature_expiration=soon", sdkToken, opRead, now, errSignatureMalformed},
		{"empty signature", "http://h/files?path=%2Ftmp%2Fy&signature=", sdkToken, opWrite, now, errSignatureWrong},
		{"unprefixed", "http://h/files?path=%2Ftmp%2Fy&signature=8IxOobRsqCbzLtYbQsR4eGXU0UN1nqsZyMie2EnAYXM", sdkToken, opWrite, now, errSignatureWrong},
	} {
		if err := checkURL(t, c.url, c.token, c.op, c.at); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}
