package fabric

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// The decoders below read bytes that come off the wire; none may panic or
// accept what it cannot re-encode.

func FuzzDecodeRequest(f *testing.F) {
	f.Add(appendRequest(nil, request{kind: kindCall, method: "ping"})[4:])
	f.Add(appendRequest(nil, request{kind: kindStream, timeout: time.Second, method: "logs.follow", params: []byte(`{"job":"x"}`)})[4:])
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			return
		}
		again, err := decodeRequest(appendRequest(nil, r)[4:])
		if err != nil || again.method != r.method || again.kind != r.kind || !bytes.Equal(again.params, r.params) {
			t.Fatalf("re-encode of %+v gave %+v, %v", r, again, err)
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(appendResponse(nil, statusOK, []byte(`{"a":1}`))[4:])
	f.Add(appendResponse(nil, statusError, []byte(`{"code":"x","message":"y"}`))[4:])
	f.Add([]byte{1, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		res, e, err := decodeResponse(b)
		if err == nil && e != nil && e.Code == "" {
			t.Fatal("error without code accepted")
		}
		_ = res
	})
}

func FuzzReadFrame(f *testing.F) {
	f.Add(appendResponse(nil, statusOK, []byte("x")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, err := readFrame(bytes.NewReader(b), 1<<16, nil)
		if err == nil && len(body) > 1<<16 {
			t.Fatal("frame over the limit returned")
		}
	})
}

func FuzzParsePeer(f *testing.F) {
	k := "6b1e2c7d6b1e2c7d6b1e2c7d6b1e2c7d6b1e2c7d6b1e2c7d6b1e2c7d6b1e2c7d"
	f.Add(k + "@127.0.0.1:7420")
	f.Add(k + "@[::1]:1,a:2")
	f.Add("@:")
	f.Fuzz(func(t *testing.T, s string) {
		key, addrs, err := ParsePeer(s)
		if err != nil {
			return
		}
		if _, err := ParsePublicKey(key.String()); err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if a == "" {
				t.Fatal("empty address accepted")
			}
		}
	})
}

func FuzzPeerCertificate(f *testing.F) {
	id, _ := GenerateIdentity()
	cert, _ := certificate(id)
	f.Add(cert.Certificate[0])
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, der []byte) {
		k, err := peerKey([][]byte{der})
		if err == nil && k.IsZero() {
			t.Fatal("zero key accepted")
		}
	})
}

func FuzzDirectoryAnnounce(f *testing.F) {
	f.Add([]byte(`{"topic":"inference/x","addrs":["127.0.0.1:1"],"ttlSeconds":5,"meta":{"r":1}}`))
	f.Add([]byte(`{"topic":"","ttlSeconds":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p AnnounceParams
		if json.Unmarshal(b, &p) != nil {
			return
		}
		d := NewDirectory(nil)
		var k PublicKey
		k[0] = 1
		if d.Announce(k, p) == nil {
			if got := d.Lookup(p.Topic); len(got) != 1 {
				t.Fatalf("accepted announcement not listed: %+v", got)
			}
		}
	})
}
