package fabric

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// alpn names the fabric protocol and its version in the TLS handshake: a
// multiplexed connection (QUIC, or TCP+TLS with yamux).
const alpn = "cosmicac-fabric/1"

// alpnDirect names a TCP+TLS connection that carries one stream and no
// multiplexer (see OpenDirectStream).
const alpnDirect = "cosmicac-fabric-direct/1"

// alpnPark names a direct connection dialled the other way round: the
// dialler parks it with the server, which opens one stream on it later (see
// MethodPark).
const alpnPark = "cosmicac-fabric-park/1"

// serverName is sent as SNI; certificates are not checked against it, the
// key is what is checked.
const serverName = "cosmicac.fabric"

var (
	// ErrRefused is returned when the remote peer's policy refused our key
	// during the handshake.
	ErrRefused = errors.New("fabric: refused by peer")
	// ErrKeyMismatch is returned when the peer at an address holds another
	// key than the one dialled.
	ErrKeyMismatch = errors.New("fabric: peer holds a different key than the one dialled")
)

// certificate makes a self-signed certificate for id. The certificate only
// carries the key; its names and dates are not used for trust.
func certificate(id *Identity) (tls.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: id.pub.String()},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, id.priv.Public(), id.priv)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("create certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: id.priv}, nil
}

// peerKey extracts and checks the ed25519 key of a peer's certificate chain.
// The TLS 1.3 CertificateVerify message has already proved that the peer
// holds the private half of the leaf's key.
func peerKey(rawCerts [][]byte) (PublicKey, error) {
	var k PublicKey
	if len(rawCerts) != 1 {
		return k, fmt.Errorf("fabric: want exactly one certificate, got %d", len(rawCerts))
	}
	cert, err := x509.ParseCertificate(rawCerts[0])
	if err != nil {
		return k, fmt.Errorf("fabric: parse peer certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok {
		return k, fmt.Errorf("fabric: peer certificate key is %T, want ed25519", cert.PublicKey)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		return k, fmt.Errorf("fabric: peer certificate is not self-signed by its key: %w", err)
	}
	copy(k[:], pub)
	return k, nil
}

// serverTLS admits clients whose key the policy lets in, speaking one of
// protos.
func serverTLS(cert tls.Certificate, policy Policy, protos ...string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAnyClientCert,
		NextProtos:   protos,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			k, err := peerKey(raw)
			if err != nil {
				return err
			}
			if policy.Access(k) == AccessNone {
				return ErrRefused
			}
			return nil
		},
	}
}

// clientTLS accepts only a server holding want, speaking proto.
func clientTLS(cert tls.Certificate, want PublicKey, proto string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{cert},
		NextProtos:         []string{proto},
		ServerName:         serverName,
		InsecureSkipVerify: true, // replaced by the key pinning below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			k, err := peerKey(raw)
			if err != nil {
				return err
			}
			if k != want {
				return fmt.Errorf("%w: dialled %s, reached %s", ErrKeyMismatch, want.Short(), k.Short())
			}
			return nil
		},
	}
}

// keyFromState returns the verified peer key of a completed handshake.
func keyFromState(cs tls.ConnectionState) (PublicKey, error) {
	raw := make([][]byte, len(cs.PeerCertificates))
	for i, c := range cs.PeerCertificates {
		raw[i] = c.Raw
	}
	return peerKey(raw)
}
